"""The PromQL expressions of the Grafana dashboard under ops/, template variables replaced.

Shared by check_rules.py (promtool checks them) and prometheus_scenarios.py (a real
Prometheus evaluates them). Standard library only.
"""

import json
import pathlib
import re

DASHBOARD = pathlib.Path(__file__).resolve().parents[2] / "ops" / "grafana" / "loopguard-dashboard.json"

# Grafana's variables, replaced by values Prometheus accepts.
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$pool": ".+",
    "$instance": ".+",
}


def raw_exprs(path=DASHBOARD):
    """Every `expr`/`query` of the panels, and the selector of each `label_values` variable."""
    doc = json.loads(pathlib.Path(path).read_text())
    out = []

    def walk(value):
        if isinstance(value, dict):
            for key, v in value.items():
                if key in ("expr", "query") and isinstance(v, str):
                    out.append(v)
                else:
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(doc.get("panels", []))
    for var in doc.get("templating", {}).get("list", []):
        query = var.get("query")
        if var.get("type") != "query" or not isinstance(query, str):
            continue
        # label_values(SELECTOR, label) is Grafana's; the selector is PromQL.
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query, re.S)
        out.append(m.group(1) if m else query)
    return out


def substitute(expr):
    for var, value in sorted(GRAFANA_VARS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    return expr


def exprs(path=DASHBOARD):
    return [substitute(e) for e in raw_exprs(path)]
