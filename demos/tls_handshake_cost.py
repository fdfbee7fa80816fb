#!/usr/bin/env python3
"""What a TLS handshake costs loopguard-exporter's loop thread, measured on the example.

The exporter handshakes on its loop (rustls through futures-rustls), so every new TLS
connection spends the loop's CPU. This starts the example over TLS with a fresh ECDSA P-256
and RSA-2048 certificate (openssl), drives full handshakes at it with `openssl s_time -new`
(TLS 1.3, then 1.2) for a few seconds, and divides the loop thread's CPU time (and the
whole process's) by the handshakes counted:

    cargo build --release -p loopguard-exporter --example registry_exporter \
        --features loopguard-exporter/web-config,loopguard-exporter/tls
    python3 demos/tls_handshake_cost.py target/release/examples/registry_exporter \
        [--node-exporter /usr/bin/prometheus-node-exporter] [--secs 5] [--json]

With `--node-exporter`, Debian's node_exporter (exporter-toolkit, Go's crypto/tls) gets the
same files and the same client, beside it: its handshakes run on goroutines over every
core, so only its process figure compares. The client runs on the same machine, so the
handshake rate is the pair's; the CPU per handshake is the server's own.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def certificate(directory, kind):
    key, crt = os.path.join(directory, f"{kind}.key"), os.path.join(directory, f"{kind}.crt")
    new_key = ["-newkey", "rsa:2048"] if kind == "rsa2048" else [
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    subprocess.run(["openssl", "req", "-x509", *new_key, "-nodes", "-keyout", key, "-out", crt,
                    "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    config = os.path.join(directory, f"{kind}.yml")
    with open(config, "w") as f:
        f.write(f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n")
    return config


def cpu_seconds(pid, tid):
    fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def process_seconds(pid):
    return sum(cpu_seconds(pid, tid) for tid in os.listdir(f"/proc/{pid}/task"))


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_example(binary, config):
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--series", "100",
                             "--web.config.file", config],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    found = re.search(r"listening on https://([\d.:]+)", line)
    if not found:
        proc.kill()
        sys.exit(f"tls_handshake_cost: the example said {line!r}, not listening on https://")
    return proc, found.group(1)


def start_node_exporter(binary, config):
    addr = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([binary, f"--web.listen-address={addr}", f"--web.config.file={config}",
                             "--collector.disable-defaults"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # exporter-toolkit logs "TLS is enabled" once it listens
        if "TLS is enabled" in line:
            return proc, addr
    sys.exit(f"tls_handshake_cost: node_exporter exited ({proc.wait()}) before listening")


def measure(start, binary, config, version, secs):
    proc, addr = start(binary, config)
    try:
        time.sleep(0.5)  # past start-up work
        loop0, all0 = cpu_seconds(proc.pid, proc.pid), process_seconds(proc.pid)
        out = subprocess.run(["openssl", "s_time", "-connect", addr, "-new",
                              "-time", str(secs), f"-{version}"],
                             capture_output=True, text=True).stdout
        loop1, all1 = cpu_seconds(proc.pid, proc.pid), process_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
    counted = re.search(r"(\d+) connections in [\d.]+s", out)
    if not counted or int(counted.group(1)) == 0:
        sys.exit(f"tls_handshake_cost: openssl s_time said {out!r}")
    n = int(counted.group(1))
    return {"handshakes": n, "per_s": n / secs,
            "loop_ms_per_handshake": 1000 * (loop1 - loop0) / n,
            "process_ms_per_handshake": 1000 * (all1 - all0) / n}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--node-exporter", help="Debian's prometheus-node-exporter, beside it")
    parser.add_argument("--secs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for kind in ["ecdsa_p256", "rsa2048"]:
            config = certificate(directory, kind)
            for version in ["tls1_3", "tls1_2"]:
                servers = [("loopguard-exporter", start_example, args.binary)]
                if args.node_exporter:
                    servers.append(("node_exporter", start_node_exporter, args.node_exporter))
                for server, start, binary in servers:
                    rows.append({"server": server, "key": kind, "version": version,
                                 **measure(start, binary, config, version, args.secs)})
    if args.json:
        print(json.dumps({"load_average": os.getloadavg()[0], "runs": rows}))
        return
    for r in rows:
        print(f"{r['server']:>18} {r['key']:>10} {r['version']}: {r['handshakes']} handshakes "
              f"({r['per_s']:.0f}/s); main thread {r['loop_ms_per_handshake']:.3f} ms CPU each, "
              f"process {r['process_ms_per_handshake']:.3f} ms")


if __name__ == "__main__":
    main()
