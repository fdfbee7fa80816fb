"""The Prometheus rules and the dashboard under ops/, checked with promtool.

1. `promtool check rules` on every rule file, `promtool test rules` on every test file.
2. The tests cover the rules: every alert fires in some case and is silent in another
   case of that same test group, and is silent in the groups named "idle" and "healthy";
   every recording rule has a promql_expr_test; tests name only alerts that exist (a
   misspelt alertname would pass silently) and load every rule file.
3. Every alert says what to do (summary, description, severity).
4. Every expression of the Grafana dashboard, template variables substituted, passes
   `promtool check rules` (written into a temporary rules file).

Run from the repository root with a python that has PyYAML: `python .ci/ops/check_rules.py`.
Ends with a line "check_rules: N passed, N failed".
"""

import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lib"))

import dashboard  # noqa: E402
from tally import Tally  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "ops" / "prometheus"
TESTS_DIR = RULES_DIR / "tests"
TALLY = Tally("check_rules")
check = TALLY.check


def promtool(*args):
    run = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)
    return run.returncode, run.stdout + run.stderr


def rule_files():
    return sorted(RULES_DIR.glob("*.yaml"))


def test_files():
    return sorted(TESTS_DIR.glob("*.test.yaml"))


def load_rules():
    alerts, records = {}, {}
    for path in rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    alerts[rule["alert"]] = rule
                else:
                    records[rule["record"]] = rule
    return alerts, records


def check_promtool():
    code, out = promtool("check", "rules", *map(str, rule_files()))
    check(code == 0, f"promtool check rules:\n{out}")
    print(out.strip())
    code, out = promtool("test", "rules", *map(str, test_files()))
    check(code == 0, f"promtool test rules:\n{out}")
    print(out.strip())


def check_coverage(alerts, records):
    fires, silent = {}, {}  # alert -> set of group names
    exprs = []
    for path in test_files():
        doc = yaml.safe_load(path.read_text())
        loaded = {(path.parent / f).resolve() for f in doc["rule_files"]}
        check(
            loaded == {p.resolve() for p in rule_files()},
            f"{path.name} loads every rule file (it loads {sorted(map(str, loaded))})",
        )
        for group in doc["tests"]:
            name = group.get("name", "")
            check(name != "", f"{path.name}: every test group has a name")
            for case in group.get("alert_rule_test", []):
                alert = case["alertname"]
                check(alert in alerts, f"{path.name} '{name}' tests unknown alert {alert}")
                target = fires if case.get("exp_alerts") else silent
                target.setdefault(alert, set()).add(name)
            exprs += [case["expr"] for case in group.get("promql_expr_test", [])]
    for alert in sorted(alerts):
        check(alert in fires, f"{alert} has a test case where it fires")
        for quiet in ("idle", "healthy"):
            check(quiet in silent.get(alert, set()), f"{alert} is tested silent in '{quiet}'")
        both = fires.get(alert, set()) & silent.get(alert, set())
        check(both, f"{alert} is silent and fires within one test group (threshold or `for`)")
    for record in sorted(records):
        check(
            any(re.search(re.escape(record) + r"\b", e) for e in exprs),
            f"recording rule {record} has a promql_expr_test",
        )


def check_annotations(alerts):
    for name, rule in sorted(alerts.items()):
        ann = rule.get("annotations", {})
        check(ann.get("summary") and ann.get("description"), f"{name} has a summary and a description")
        check(rule.get("labels", {}).get("severity") in {"info", "warning", "critical"}, f"{name} has a severity")


def check_dashboard():
    exprs = dashboard.exprs()
    check(len(exprs) >= 20, f"the dashboard has its expressions ({len(exprs)} found)")
    left = [e for e in exprs if "$" in e]
    check(not left, f"every template variable is substituted: {left}")
    check(
        any("instance_pool:loopguard_pool_offered_load:rate2m" in e for e in exprs),
        "the dashboard shows the offered load",
    )
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(rules, f)
    code, out = promtool("check", "rules", f.name)
    pathlib.Path(f.name).unlink()
    check(code == 0, f"promtool check rules on the dashboard's expressions:\n{out}")
    print(f"dashboard: {len(exprs)} expressions checked by promtool")


def main():
    alerts, records = load_rules()
    check(len(alerts) >= 12 and len(records) >= 2, f"rules found: {len(alerts)} alerts, {len(records)} recordings")
    check_promtool()
    check_coverage(alerts, records)
    check_annotations(alerts)
    check_dashboard()
    return TALLY.summary()


if __name__ == "__main__":
    sys.exit(main())
