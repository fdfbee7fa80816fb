"""A real Prometheus (Debian's) scrapes the peers with basic auth, over TLS where the file
has it, and its HTTP API says `up`: 1 with the right password, 0 with a wrong one (and the
target's last error says 401).
"""

import json
import pathlib
import subprocess
import tempfile
import time

import fixtures
import peers
from procs import free_port, stop
from prometheus_api import PrometheusApi

WAIT_SECONDS = 30


class Prometheus(PrometheusApi):
    def __init__(self, binary, jobs, tries=5):
        """jobs: [(job_name, addr, tls, password, ca_file)], each for user fixtures.USER."""
        self.dir = tempfile.TemporaryDirectory(prefix="loopguard-webconfig-prom-")
        self.jobs = jobs
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [job_config(*job) for job in jobs],
        }
        path = pathlib.Path(self.dir.name) / "prometheus.yml"
        path.write_text(json.dumps(config, indent=1))  # JSON is YAML
        for _ in range(tries):
            self.port = free_port()
            log = tempfile.TemporaryFile("w+")
            self.proc = subprocess.Popen(
                [binary, f"--config.file={path}", f"--web.listen-address=127.0.0.1:{self.port}",
                 f"--storage.tsdb.path={pathlib.Path(self.dir.name) / 'data'}", "--log.level=warn"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            peers.children.append(self.proc)
            deadline = time.monotonic() + 20
            while not self.ready() and self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.proc.poll() is None and self.ready():
                return
            stop(self.proc)
            log.seek(0)
            text = log.read()
            if "address already in use" not in text:
                raise peers.StartFailed(f"Prometheus did not become ready:\n{text[-3000:]}")
        raise peers.StartFailed(f"Prometheus: no free port in {tries} tries")

    def up(self):
        """{job: up} once every job has a sample (or what there is at the deadline)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            ups = {s["metric"]["job"]: float(s["value"][1]) for s in self.api("query", query="up")["result"]}
            if len(ups) == len(self.jobs) or time.monotonic() > deadline:
                return ups
            time.sleep(0.25)

    def last_errors(self):
        return {t["labels"]["job"]: t.get("lastError", "") for t in self.api("targets")["activeTargets"]}

    def stop(self):
        stop(self.proc)
        self.dir.cleanup()


def job_config(name, addr, tls, password, ca_file):
    job = {
        "job_name": name,
        "scheme": "https" if tls else "http",
        "basic_auth": {"username": fixtures.USER, "password": password},
        "static_configs": [{"targets": [addr]}],
    }
    if tls:
        job["tls_config"] = {"ca_file": str(ca_file)}
    return job


def check(binary, targets, ca_file):
    """targets: [(label, addr, tls)]. Two jobs each (right and wrong password); returns
    [(job, expected up, read up, last error, ok)]."""
    jobs = []
    for label, addr, tls in targets:
        jobs.append((f"{label} right-password", addr, tls, fixtures.PASSWORD, ca_file))
        jobs.append((f"{label} wrong-password", addr, tls, fixtures.WRONG_PASSWORD, ca_file))
    prom = Prometheus(binary, jobs)
    try:
        ups = prom.up()
        errors = prom.last_errors()
    finally:
        prom.stop()
    rows = []
    for name, *_ in jobs:
        right = name.endswith("right-password")
        want = 1.0 if right else 0.0
        got = ups.get(name)
        error = errors.get(name, "")
        ok = got == want and (right or "401" in error)
        rows.append((name, want, got, error, ok))
    return rows
