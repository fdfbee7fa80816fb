"""A real Prometheus scrapes the registry exporter; its HTTP API says what happened.

Each scenario starts the exporter (`--listen 127.0.0.1:0`, address read from its
`listening on http://ADDR` line) and a Prometheus (Debian's package) on a free loopback
port with a config written here: several scrape jobs on the one exporter, each with its
own scrape_timeout, 1 s scrape and rule evaluation intervals, a temporary TSDB, nothing
remote. It waits (polling the API, with a deadline) for enough samples, reads the API,
checks, and stops both processes.

The rules of ops/prometheus are loaded with every duration (range windows, `for`) divided
by 15: they are written for 15 s scrapes, and here Prometheus scrapes every second, so the
2 minutes of samples a `[2m]` window holds in production take 8 s (a rate over a window
that is mostly empty reads low: Prometheus divides by the whole window). Nothing else of
the rules changes; promtool's unit tests (ops/prometheus/tests) run them unscaled.

- healthy: every job up == 1 at every scrape, no rejection, no loopguard alert pending,
  every dashboard expression evaluates.
- overloaded: callers from this process (10/s, random arrivals) and 2 scrape jobs offer
  2.4 times what 2 workers can walk. Refused scrapes and callers get 503s, each counted in
  loopguard_pool_rejected_total; no scrape reaches its job's timeout; the
  offered-load recording (and the KEDA query of ops/kubernetes, verbatim) reads at least
  1.5 x capacity while loopguard_pool_demand_avg stays at capacity; the scaling and
  rejection alerts go pending.
- long walk: walks of 2.5 s, a job whose budget is 0.5 s: every one of its scrapes gets 504
  (not a refusal's 503) at the budget, below its timeout, and a patient job sees the orphaned walks still holding
  their slots (oldest job older than the budget, in_use) and finishing (mean job time).
- coalesced: --cache-ttl-ms 1000 and 6 jobs: every job up at every scrape, about one walk
  per TTL (loopguard_refresh_runs_total).

The exporter binary: $LOOPGUARD_EXPORTER, or what `$LOOPGUARD_EXPORTER_BUILD` builds (default
`cargo build --release --locked --workspace --example registry_exporter`), found in cargo's
JSON messages. Prometheus: $PROMETHEUS (default `prometheus` on PATH).
Standard library only. `--json` adds the figures as one JSON line. A watchdog ends the
scenarios 170 s after the exporter is built. Ends with "prometheus_scenarios: N passed, N failed".
"""

import atexit
import json
import math
import os
import pathlib
import queue
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lib"))

import dashboard  # noqa: E402
from procs import free_port, stop  # noqa: E402 (replicas.py takes both from here too)
from prometheus_api import PrometheusApi  # noqa: E402
from tally import Tally  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = sorted((ROOT / "ops" / "prometheus").glob("*.yaml"))
TIME_SCALE = 15  # production scrape interval / the 1 s used here
KEDA = ROOT / "ops" / "kubernetes" / "keda-scaledobject.yaml"
WATCHDOG_SECONDS = 170
DEFAULT_BUILD = "cargo build --release --locked --workspace --example registry_exporter"

children = []
TALLY = Tally("prometheus_scenarios", verbose=True)
check = TALLY.check
figures = {}


def kill_children():
    for child in children:
        if child.poll() is None:
            child.kill()


atexit.register(kill_children)


def watchdog():
    print(f"prometheus_scenarios: watchdog: still running after {WATCHDOG_SECONDS} s, stopping", flush=True)
    kill_children()
    os._exit(2)


def scaled(text, factor=TIME_SCALE):
    """`text` (a rules file) with every range window and `for:` divided by `factor`."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}

    def shrink(m):
        ms = round(int(m.group(2)) * units[m.group(3)] * 1000 / factor)
        value = f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
        return f"{m.group(1)}{value}{m.group(4)}"

    text = re.sub(r"(\[)(\d+)(ms|s|m|h)(\])", shrink, text)
    return re.sub(r"(\bfor: )(\d+)(ms|s|m|h)(\s)", shrink, text)


def exporter_binary():
    if os.environ.get("LOOPGUARD_EXPORTER"):
        return os.environ["LOOPGUARD_EXPORTER"]
    cmd = shlex.split(os.environ.get("LOOPGUARD_EXPORTER_BUILD", DEFAULT_BUILD)) + ["--message-format=json"]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        sys.exit(f"prometheus_scenarios: `{' '.join(cmd)}` failed:\n{run.stderr[-3000:]}")
    for line in run.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "registry_exporter":
            if msg.get("executable"):
                return msg["executable"]
    sys.exit("prometheus_scenarios: cargo built no registry_exporter executable")


class Exporter:
    def __init__(self, binary, *flags):
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", *flags],
            stdout=subprocess.PIPE, stderr=self.log, text=True,
        )
        children.append(self.proc)
        found, seen = queue.Queue(), []

        def drain():  # reads every line, so a chatty exporter never blocks on a full pipe
            for line in self.proc.stdout:
                seen.append(line)
                m = re.match(r"listening on http://(\S+)", line)
                if m:
                    found.put(m)

        threading.Thread(target=drain, daemon=True).start()
        try:
            m = found.get(timeout=15)
        except queue.Empty:
            stop(self.proc)
            self.log.seek(0)
            sys.exit(f"prometheus_scenarios: the exporter did not say where it listens: {seen} {self.log.read()}")
        self.addr = m.group(1)

    def stop(self):
        stop(self.proc)


class Prometheus(PrometheusApi):
    def __init__(self, target, jobs):
        """jobs: list of (job_name, scrape_interval_s, scrape_timeout_s, extra_labels)."""
        self.dir = tempfile.TemporaryDirectory(prefix="loopguard-prom-")
        self.port = free_port()
        self.jobs = {name: (interval, timeout) for name, interval, timeout, _ in jobs}
        rules = []
        for rule_file in RULES:
            copy = pathlib.Path(self.dir.name) / rule_file.name
            copy.write_text(scaled(rule_file.read_text()))
            rules.append(str(copy))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": rules,
            "scrape_configs": [
                {
                    "job_name": name,
                    "scrape_interval": f"{int(interval * 1000)}ms",
                    "scrape_timeout": f"{int(timeout * 1000)}ms",
                    "static_configs": [{"targets": [target], "labels": labels}],
                }
                for name, interval, timeout, labels in jobs
            ],
        }
        path = pathlib.Path(self.dir.name) / "prometheus.yml"
        path.write_text(json.dumps(config, indent=1))  # JSON is YAML
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [
                os.environ.get("PROMETHEUS", "prometheus"),
                f"--config.file={path}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--storage.tsdb.path={pathlib.Path(self.dir.name) / 'data'}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=self.log, stderr=self.log,
        )
        children.append(self.proc)
        self.started = time.monotonic()
        deadline = time.monotonic() + 20
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                sys.exit(f"prometheus_scenarios: Prometheus did not become ready:\n{self.log.read()[-3000:]}")
            time.sleep(0.1)

    def query(self, expr):
        """{job: value} (or {labels: value} without a job label) of an instant query."""
        out = {}
        for sample in self.api("query", query=expr)["result"]:
            key = sample["metric"].get("job", json.dumps(sample["metric"], sort_keys=True))
            out[key] = float(sample["value"][1])
        return out

    def scalar(self, expr):
        values = list(self.query(expr).values())
        return values[0] if values else math.nan

    def wait_until(self, expr, what, timeout):
        """Polls until `expr` returns a non-empty result (a bounded wait on a condition)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.query(expr):
                return True
            time.sleep(0.25)
        return check(False, f"within {timeout} s: {what}")

    def window(self):
        """A range covering everything scraped so far."""
        return f"{int(time.monotonic() - self.started) + 5}s"

    def stop(self):
        stop(self.proc)
        self.dir.cleanup()


def scrapes_at_least(prom, n, timeout):
    jobs = "|".join(prom.jobs)
    return prom.wait_until(
        f'min(count_over_time(up{{job=~"{jobs}"}}[1h])) >= {n}',
        f"every job scraped {n} times", timeout,
    )


def check_durations(prom, w):
    """Every job's slowest scrape stays below that job's scrape_timeout."""
    worst = prom.query(f"max_over_time(scrape_duration_seconds[{w}])")
    report = {}
    for job, (_, timeout) in prom.jobs.items():
        d = worst.get(job, math.nan)
        report[job] = {"max_scrape_duration_s": round(d, 3), "scrape_timeout_s": timeout}
        check(d < timeout, f"{job}: slowest scrape {d:.3f} s < its scrape_timeout {timeout} s")
    return report


def loopguard_alerts(prom):
    return sorted({a["labels"]["alertname"] + ":" + a["state"]
                   for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"].startswith("Loopguard")})


def check_dashboard(prom):
    present = {m for m in prom.api("label/__name__/values")}
    empty, errors = [], []
    exprs = dashboard.exprs()
    for expr in exprs:
        try:
            result = prom.api("query", query=expr)["result"]
        except (RuntimeError, OSError) as err:
            errors.append(f"{expr}: {err}")
            continue
        names = set(re.findall(r"\b(loopguard_[a-z_]+|instance_pool:[a-z_:0-9]+)", expr))
        names = {re.sub(r"_(bucket|sum|count)$", "", n) if n not in present else n for n in names}
        exported = all(n in present or f"{n}_count" in present or f"{n}_bucket" in present for n in names)
        if exported and not result:
            empty.append(expr)
    check(not errors, f"all {len(exprs)} dashboard expressions evaluate: {errors}")
    check(not empty, f"dashboard expressions over exported series return data: {empty}")


def healthy(binary):
    print("== healthy: 3 jobs, 2 workers, 20 000 series")
    exp = Exporter(binary, "--workers", "2", "--series", "20000")
    # Three timeouts, none below 0.8 s: the walks run in the idle class beside this
    # Prometheus on two vCPUs, where its own parsing of 60 000 samples a second makes a
    # scrape last 0.3 to 0.65 s (measured in CI); at 0.6 s one scrape in a run failed.
    prom = Prometheus(exp.addr, [("healthy-a", 1, 1.0, {}), ("healthy-b", 1, 0.9, {}), ("healthy-c", 1, 0.8, {})])
    try:
        scrapes_at_least(prom, 8, 30)
        w = prom.window()
        up = prom.query(f"min_over_time(up[{w}])")
        check(all(up.get(j) == 1 for j in prom.jobs), f"every job up == 1 at every scrape: {up}")
        durations = check_durations(prom, w)
        rejected = prom.query("loopguard_pool_rejected_total")
        check(rejected and max(rejected.values()) == 0, f"no scrape refused: {rejected}")
        offered = prom.query("instance_pool:loopguard_pool_offered_load:ratio_rate2m")
        check(offered and max(offered.values()) < 0.5, f"offered load well below capacity: {offered}")
        alerts = loopguard_alerts(prom)
        check(not alerts, f"no loopguard alert pending or firing: {alerts}")
        check_dashboard(prom)
        figures["healthy"] = {"jobs": durations, "offered_load_ratio": max(offered.values(), default=None)}
    finally:
        prom.stop()
        exp.stop()


class Storm:
    """Scrapes of /metrics from this process at `rate` per second, Poisson arrivals (seeded),
    each on a thread of a bounded pool, until stopped or `seconds` passed."""

    def __init__(self, addr, rate, seconds):
        import concurrent.futures
        import random

        self.codes, self.latencies = [], []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=32)
        self.url = f"http://{addr}/metrics"

        def arrivals():
            rng, end = random.Random(13), time.monotonic() + seconds
            while not self.done.wait(rng.expovariate(rate)) and time.monotonic() < end:
                self.pool.submit(self.fetch)

        self.thread = threading.Thread(target=arrivals, daemon=True)
        self.thread.start()

    def fetch(self):
        began = time.monotonic()
        try:
            with urllib.request.urlopen(self.url, timeout=10) as r:
                r.read()
                code = r.status
        except urllib.error.HTTPError as err:
            code = err.code
        except OSError:
            code = 0
        with self.lock:
            self.codes.append(code)
            self.latencies.append(time.monotonic() - began)

    def stop(self):
        self.done.set()
        self.thread.join(5)
        self.pool.shutdown(wait=True)
        with self.lock:
            return list(self.codes), list(self.latencies)


def overloaded(binary):
    print("== overloaded: callers at 10/s + 2 scrape jobs on 2 workers, walks of 0.4 s (2.4x capacity)")
    exp = Exporter(binary, "--workers", "2", "--series", "20000", "--walk-delay-ms", "400",
                   "--scrape-timeout-offset-ms", "100", "--cardinality-interval-ms", "0")
    # One job is named and labelled as in Kubernetes, so the KEDA query runs verbatim. Only
    # two jobs: their phases are fixed, so with more jobs than workers one could be
    # refused at every scrape; the storm's random arrivals refuse them about evenly.
    prom = Prometheus(exp.addr, [("registry-exporter", 1, 1.0, {"namespace": "metrics"}), ("watch", 1, 0.9, {})])
    storm = Storm(exp.addr, rate=10, seconds=60)
    try:
        scrapes_at_least(prom, 12, 40)
        prom.wait_until('ALERTS{alertname="LoopguardDemandAboveCapacity"}', "LoopguardDemandAboveCapacity pending", 15)
        w = prom.window()
        total = sum(prom.query(f"count_over_time(up[{w}])").values())
        durations = check_durations(prom, w)
        errors = [t["lastError"] for t in prom.api("targets")["activeTargets"] if t["lastError"]]
        check(all("503" in e for e in errors), f"failed scrapes got 503, not a timeout: {sorted(set(errors))}")
        capacity = prom.scalar(f"max(last_over_time(loopguard_pool_capacity[{w}]))")
        demand = prom.scalar(f"max(max_over_time(loopguard_pool_demand_avg[{w}]))")
        query = re.search(r"^\s*query:\s*(.+)$", KEDA.read_text(), re.M).group(1).strip()
        # A scaler polls: the signal must reach 1.5x capacity while the storm lasts. One
        # instant read can land on a rule evaluation whose windows a refused scrape left
        # short (on a loaded CI machine); poll for up to 20 s and keep the highest reading.
        offered = keda = -math.inf
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            o = prom.scalar("max(instance_pool:loopguard_pool_offered_load:rate2m)")
            k = prom.scalar(query)
            offered = max(offered, -math.inf if math.isnan(o) else o)
            keda = max(keda, -math.inf if math.isnan(k) else k)
            if min(offered, keda) >= 1.5 * capacity:
                break
            time.sleep(0.5)
        threshold = float(re.search(r'^\s*threshold:\s*"([^"]+)"', KEDA.read_text(), re.M).group(1))
        check(demand <= capacity + 0.01, f"admitted demand stops at capacity: {demand:.2f} of {capacity:.0f}")
        check(offered >= 1.5 * capacity, f"offered load {offered:.2f} >= 1.5 x capacity {capacity:.0f}")
        check(keda >= 1.5 * capacity, f"the KEDA query reads {keda:.2f} >= 1.5 x capacity: {query}")
        alerts = loopguard_alerts(prom)
        for name in ("LoopguardDemandAboveCapacity", "LoopguardRejectionsHigh"):
            check(any(a.startswith(name + ":") for a in alerts), f"{name} pending or firing: {alerts}")
        codes, latencies = storm.stop()
        served, refused = codes.count(200), codes.count(503)
        check(served + refused == len(codes) and refused >= 0.3 * len(codes),
              f"callers: {len(codes)} requests, {served} served, {refused} refused with 503")
        # With the storm over (its requests all answered), both jobs get through: once every
        # scrape of the last 3 s succeeded, the last one read the final count.
        quiet_since = time.monotonic()
        while time.monotonic() < quiet_since + 3.5:
            time.sleep(0.25)
        prom.wait_until("count(min_over_time(up[3s]) == 1) == 2", "every scrape succeeds after the storm", 10)
        w = prom.window()
        total = sum(prom.query(f"count_over_time(up[{w}])").values())
        scrape_failures = total - sum(prom.query(f"sum_over_time(up[{w}])").values())
        rejected = prom.scalar(f"max(last_over_time(loopguard_pool_rejected_total[{w}]))")
        check(rejected == scrape_failures + refused,
              f"every 503 is a counted rejection: {scrape_failures:.0f} failed scrapes + {refused} refused "
              f"callers = rejected_total {rejected:.0f}")
        refused_503 = sorted(t for c, t in zip(codes, latencies) if c == 503)
        figures["overloaded"] = {
            "scrapes": total, "failed_scrapes": scrape_failures, "failed_share": round(scrape_failures / total, 3),
            "callers": len(codes), "callers_refused": refused,
            "caller_503_p99_ms": round(1000 * refused_503[int(0.99 * (len(refused_503) - 1))], 1) if refused_503 else None,
            "rejected_total": rejected, "capacity": capacity, "demand_avg_max": round(demand, 3),
            "offered_load": round(offered, 3), "offered_over_capacity": round(offered / capacity, 3),
            "keda_query": round(keda, 3), "keda_replicas_for_this_pod": None if math.isnan(keda) else math.ceil(keda / threshold),
            "alerts": alerts, "jobs": durations,
        }
    finally:
        storm.stop()
        prom.stop()
        exp.stop()


def long_walk(binary):
    print("== long walk: walks of 2.5 s; 'tight' has 0.5 s of budget, 'patient' 3.5 s")
    exp = Exporter(binary, "--workers", "5", "--series", "2000", "--walk-delay-ms", "2500",
                   "--cardinality-interval-ms", "0")
    prom = Prometheus(exp.addr, [("tight", 1, 1.0, {}), ("patient", 4, 4.0, {})])
    try:
        prom.wait_until('count_over_time(up{job="patient"}[1h]) >= 2', "2 patient scrapes", 30)
        w = prom.window()
        up = prom.query(f"max_over_time(up[{w}])")
        check(up.get("tight") == 0, f"every tight scrape failed: {up}")
        check(prom.scalar(f'min_over_time(up{{job="patient"}}[{w}])') == 1, "every patient scrape succeeded")
        fastest = prom.scalar(f'min_over_time(scrape_duration_seconds{{job="tight"}}[{w}])')
        slowest = prom.scalar(f'max_over_time(scrape_duration_seconds{{job="tight"}}[{w}])')
        check(0.45 <= fastest and slowest < 1.0,
              f"tight scrapes answered at the 0.5 s budget: {fastest:.3f}..{slowest:.3f} s, timeout 1 s")
        errors = [t["lastError"] for t in prom.api("targets")["activeTargets"] if t["labels"]["job"] == "tight"]
        check(errors and "504" in errors[0], f"tight got 504 (budget spent), not 503: {errors}")
        oldest = prom.scalar(f'min_over_time(loopguard_pool_oldest_job_seconds{{job="patient"}}[{w}])')
        in_use = prom.scalar(f'min_over_time(loopguard_pool_in_use{{job="patient"}}[{w}])')
        check(oldest >= 0.9, f"at every patient scrape a walk older than the budget holds its slot: oldest {oldest:.2f} s")
        check(in_use >= 2, f"orphaned walks keep their slots: in_use >= {in_use:.0f} at every patient scrape")
        mean = prom.scalar(f'increase(loopguard_pool_job_seconds_sum{{job="patient"}}[{w}])'
                           f' / increase(loopguard_pool_job_seconds_count{{job="patient"}}[{w}])')
        check(mean >= 2.4, f"the walks ran to their end (mean job {mean:.2f} s, not the 0.5 s budget)")
        tight = prom.scalar(f'count_over_time(up{{job="tight"}}[{w}])')
        jobs = prom.scalar(f'max_over_time(loopguard_pool_jobs_total{{job="patient", outcome="ok"}}[{w}])')
        check(jobs >= tight - 6, f"tight's walks were finished and counted: {jobs:.0f} jobs for {tight:.0f} tight scrapes")
        figures["long_walk"] = {
            "tight_scrape_duration_s": [round(fastest, 3), round(slowest, 3)], "tight_budget_s": 0.5,
            "tight_timeout_s": 1.0, "oldest_job_at_patient_scrapes_s": round(oldest, 3),
            "in_use_min": in_use, "mean_job_s": round(mean, 3), "tight_scrapes": tight, "jobs_ok": jobs,
        }
    finally:
        prom.stop()
        exp.stop()


def coalesced(binary):
    print("== coalesced: --cache-ttl-ms 1000, 6 jobs x 1/s on 2 workers, walks of 0.1 s")
    # 5 000 series: six bodies a second to parse, on a machine shared with the build.
    exp = Exporter(binary, "--workers", "2", "--series", "5000", "--walk-delay-ms", "100",
                   "--cache-ttl-ms", "1000", "--scrape-timeout-offset-ms", "300")
    jobs = [(f"cached-{i}", 1, t, {}) for i, t in enumerate([1.0, 1.0, 0.9, 0.9, 0.8, 0.8])]
    prom = Prometheus(exp.addr, jobs)
    try:
        scrapes_at_least(prom, 10, 30)
        w = prom.window()
        up = prom.query(f"min_over_time(up[{w}])")
        check(all(up.get(j) == 1 for j in prom.jobs), f"every job up == 1 at every scrape: {up}")
        durations = check_durations(prom, w)
        runs = prom.query(f'max_over_time(loopguard_refresh_runs_total{{outcome="ok"}}[{w}])')
        runs = max(runs.values()) if runs else math.nan
        per_job = prom.query(f"count_over_time(up[{w}])")
        scrapes = sum(per_job.values())
        span = max(per_job.values()) * 1.0  # seconds of scraping: one scrape per second
        # One walk per TTL at most (a walk starts when a scrape finds the value stale).
        check(runs <= span / 1.0 + 2, f"{runs:.0f} walks in {span:.1f} s for {scrapes:.0f} scrapes (TTL 1 s)")
        check(runs >= span / 3.0, f"walks keep going: {runs:.0f} in {span:.1f} s")
        rejected = prom.query("loopguard_pool_rejected_total")
        check(rejected and max(rejected.values()) == 0, f"no scrape refused: {rejected}")
        check_dashboard(prom)
        figures["coalesced"] = {"walks": runs, "seconds": round(span, 1), "scrapes": scrapes, "jobs": durations}
    finally:
        prom.stop()
        exp.stop()


def main():
    # The build has its own time limit (a cold release build of the workspace's examples
    # takes minutes on 2 cores); the watchdog bounds the scenarios themselves.
    binary = exporter_binary()
    print(f"exporter: {binary}")
    timer = threading.Timer(WATCHDOG_SECONDS, watchdog)
    timer.daemon = True
    timer.start()
    began = time.monotonic()
    for scenario in (healthy, overloaded, long_walk, coalesced):
        start = time.monotonic()
        scenario(binary)
        print(f"   ({time.monotonic() - start:.1f} s)")
    figures["seconds"] = round(time.monotonic() - began, 1)
    if "--json" in sys.argv:
        print(json.dumps(figures))
    return TALLY.summary()


if __name__ == "__main__":
    sys.exit(main())
