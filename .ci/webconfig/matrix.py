"""Web config files checked by real tools: promtool, Prometheus and node_exporter.

    python3 .ci/webconfig/matrix.py --example PATH [--require-tls]
        [--node-exporter prometheus-node-exporter] [--prometheus prometheus]

1. Makes a test PKI, bcrypt hashes (htpasswd) and six web config files (fixtures.py):
   basic auth only, basic auth with headers, TLS only, TLS + basic auth (with headers),
   TLS with min_version TLS13, TLS with RequireAndVerifyClientCert + client_ca_file.
   Debian's `promtool check web-config` must accept every one (and refuse two broken
   controls, so that its check is real).
2. Gives each file to Debian's node_exporter 1.5 and to the exporter example (PATH), and
   sends both the same requests (probe.py): plain HTTP to a TLS port, TLS 1.2 and 1.3
   against min_version, a client certificate missing, from another CA and right, no
   credentials, a wrong password, an unknown user, an Authorization that is not Basic, not
   base64, not UTF-8, the right user. Each cell's outcome (handshake refused, or the status
   with WWW-Authenticate and the file's headers) must be the same from both, and
   node_exporter's must be the one the cell expects (issue 30's required behaviour; it
   asks for node_exporter's outcome, and node_exporter 1.5 gives it in every cell: the one
   difference beyond the outcome, Go's extra nosniff header, is told in probe.py).
3. A real Prometheus scrapes both peers with basic auth (over TLS for the TLS + basic auth
   file) and reads `up` 1 with the right password, 0 (a 401) with a wrong one.

TLS rows: an example built without TLS refuses `tls_server_config` at start; then its TLS
cells are skipped with a line saying so (node_exporter's still run and must meet the
expectations), unless --require-tls (CI passes it when exporter/Cargo.toml has a `tls`
feature, and builds the example with it): then a refusal is a failure.

Standard library only. Prints a table; exits 1 on any difference, any unexpected outcome,
or a peer failing to start or dying. Ends with "webconfig: N cells, N failed, N skipped".
"""

import argparse
import atexit
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# .ci/lib: procs (free ports, stopping children), prometheus_api.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lib"))

import fixtures  # noqa: E402
import peers  # noqa: E402
import probe  # noqa: E402
import scrape  # noqa: E402
from probe import AUTH_ROWS, RIGHT, Request  # noqa: E402

WATCHDOG_SECONDS = 150


def cells():
    """[(file, row, Request, the outcome class expected)]."""
    out = []
    # Basic auth only, plain HTTP. Go's Request.BasicAuth takes the scheme in any case, and
    # padded standard base64 only; a user or password that is not UTF-8 matches no user
    # (the file's are UTF-8): 401, as issue 30 asks.
    for row, authorization in AUTH_ROWS:
        want = "200" if row.startswith("right user") else "401"
        out.append(("basic", row, Request(False, authorization), want))
    # A TLS ClientHello to a plain port: Go answers it as a bad HTTP request, which no TLS
    # client takes for a ServerHello.
    out.append(("basic", "TLS to a plain-HTTP port", Request(True, RIGHT), "refused"))
    # The file's headers go on every answer, refused or served.
    for row, authorization in (AUTH_ROWS[0], AUTH_ROWS[1], AUTH_ROWS[-2]):
        want = "200" if row.startswith("right user") else "401"
        out.append(("basic+headers", row, Request(False, authorization), want))
    for row, authorization in AUTH_ROWS:
        want = "200" if row.startswith("right user") else "401"
        out.append(("tls+basic", f"{row}, over TLS", Request(True, authorization), want))
    out.append(("tls+basic", "plain HTTP to a TLS port, right user", Request(False, RIGHT), "400"))
    out += [
        ("tls", "plain HTTP to a TLS port", Request(False), "400"),
        ("tls", "TLS 1.2", Request(True, version="1.2"), "200"),
        ("tls", "TLS 1.3", Request(True, version="1.3"), "200"),
        # NoClientCert: no certificate is asked for, so the client sends none.
        ("tls", "client certificate from CA B, not asked for", Request(True, client="b"), "200"),
        ("tls13", "plain HTTP to a TLS port", Request(False), "400"),
        ("tls13", "TLS 1.2 against min_version TLS13", Request(True, version="1.2"), "refused"),
        ("tls13", "TLS 1.3 against min_version TLS13", Request(True, version="1.3"), "200"),
        ("mtls", "plain HTTP to a TLS port", Request(False), "400"),
    ]
    for version in ("1.2", "1.3"):
        out += [
            ("mtls", f"no client certificate, TLS {version}", Request(True, version=version), "refused"),
            ("mtls", f"client certificate from CA B, TLS {version}",
             Request(True, version=version, client="b"), "refused"),
            ("mtls", f"client certificate from CA A (client_ca_file), TLS {version}",
             Request(True, version=version, client="a"), "200"),
        ]
    return out


def check_files(files, tmp, pki):
    """promtool accepts every file and refuses the two controls; returns the failures."""
    failures = []
    for path, ok, said in fixtures.promtool_check(files.values()):
        print(f"  promtool check web-config {path.name}: {'accepted' if ok else 'REFUSED'}")
        if not ok:
            failures.append(f"promtool refuses {path.name}: {said}")
    # Controls: an unknown key, and a key that is not the certificate's. If promtool took
    # these, its acceptance above would mean nothing.
    unknown = tmp / "control-unknown-key.yml"
    unknown.write_text("no_such_key: 1\n")
    mismatched = tmp / "control-mismatched-key.yml"
    mismatched.write_text(f"tls_server_config:\n  cert_file: {pki['server.crt']}\n"
                          f"  key_file: {pki['client-b.key']}\n")
    for path, ok, said in fixtures.promtool_check([unknown, mismatched]):
        print(f"  promtool check web-config {path.name} (a control): {'ACCEPTED' if ok else 'refused'}")
        if ok:
            failures.append(f"promtool accepts the broken control {path.name}")
    return failures


def start_peers(args, files):
    """{file: (node_exporter, example or None)}; failures for peers that did not start."""
    started, failures = {}, []
    for name, path in files.items():
        try:
            node = peers.node_exporter(args.node_exporter, path)
        except peers.StartFailed as failed:
            failures.append(f"node_exporter did not start with {name}: {failed}")
            continue
        try:
            example = peers.example(args.example, path)
        except peers.Refused as refused:
            example = None
            said = str(refused).strip().splitlines()[-1]
            if "tls" not in name:
                failures.append(f"the example refused {name}: {said}")
            elif args.require_tls:
                failures.append(f"the example refused {name} (--require-tls): {said}")
            else:
                print(f"  SKIPPED: the example's {name} cells (built without TLS: {said})")
        except peers.StartFailed as failed:
            example = None
            failures.append(f"the example did not start with {name}: {failed}")
        started[name] = (node, example)
    return started, failures


def run_cells(started, pki):
    """Sends every cell to both peers: [(file, row, want, node, example, verdict)]."""
    rows = []
    for name, row, request, want in cells():
        if name not in started:
            continue
        node, example = started[name]
        headers = tuple(fixtures.HEADERS) if name in fixtures.WITH_HEADERS else ()
        got_node = probe.send(node.addr, request, pki, headers)
        got_example = probe.send(example.addr, request, pki, headers) if example else None
        if got_node.cls != want:
            verdict = f"FAIL: node_exporter answered {got_node.cls}, expected {want}"
        elif got_example is None:
            verdict = "skipped (example without TLS)"
        elif got_example.cls != got_node.cls:
            verdict = "FAIL: different outcome"
        elif got_example.key != got_node.key:
            verdict = "FAIL: different headers or body"
        else:
            verdict = "same"
        rows.append((name, row, want, got_node, got_example, verdict))
    return rows


def print_table(rows):
    head = ("file", "request", "expected", "node_exporter", "example", "verdict")
    table = [(f, r, w, n.cls, e.cls if e else "-", v) for f, r, w, n, e, v in rows]
    widths = [max(len(str(x[i])) for x in [head, *table]) for i in range(len(head))]
    for line in [head, tuple("-" * w for w in widths), *table]:
        print("  " + "  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    for f, r, _, n, e, v in rows:
        if v.startswith("FAIL"):
            print(f"  {f} / {r}:\n    node_exporter: {n.key} {n.detail}\n"
                  f"    example:       {e.key + ' ' + e.detail if e else '-'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", required=True, help="the registry_exporter binary")
    parser.add_argument("--node-exporter", default="prometheus-node-exporter")
    parser.add_argument("--prometheus", default="prometheus")
    parser.add_argument("--require-tls", action="store_true",
                        help="the example must take tls_server_config (built with `tls`)")
    args = parser.parse_args()
    tools = ["openssl", "htpasswd", "promtool", args.prometheus, args.node_exporter, args.example]
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        sys.exit(f"webconfig: not installed: {' '.join(missing)} (Debian: openssl, apache2-utils, "
                 "prometheus, prometheus-node-exporter; see .ci/run)")
    started_at = time.monotonic()
    atexit.register(peers.stop_all)
    timer = threading.Timer(WATCHDOG_SECONDS, lambda: (print(
        f"webconfig: watchdog: still running after {WATCHDOG_SECONDS} s", flush=True),
        peers.stop_all(), os._exit(2)))
    timer.daemon = True
    timer.start()

    with tempfile.TemporaryDirectory(prefix="loopguard-webconfig-") as tmp:
        tmp = pathlib.Path(tmp)
        pki = fixtures.make_pki(tmp)
        files = fixtures.web_configs(tmp, pki)
        print("== web config files (promtool check web-config)")
        failures = check_files(files, tmp, pki)

        print("== peers: node_exporter and the example, each file")
        started, failed = start_peers(args, files)
        failures += failed

        print("== the matrix")
        rows = run_cells(started, pki)
        print_table(rows)
        failures += [f"{f} / {r}: {v}" for f, r, _, _, _, v in rows if v.startswith("FAIL")]
        for name, pair in started.items():
            for peer in filter(None, pair):
                if not peer.alive():
                    failures.append(f"{peer.name} with {name} died:\n{peer.output()[-2000:]}")

        print("== Prometheus scrapes with basic auth")
        targets = []
        for name in ("basic", "tls+basic"):
            node, example = started.get(name, (None, None))
            targets += [(f"{p.name} {name}", p.addr, name != "basic") for p in (node, example) if p]
        for job, want, got, error, ok in scrape.check(args.prometheus, targets, pki["ca-a.crt"]):
            print(f"  {'ok' if ok else 'FAIL'}: {job}: up {got} (expected {want:.0f})"
                  + (f"; last error: {error}" if error else ""))
            if not ok:
                failures.append(f"Prometheus job {job}: up {got}, expected {want:.0f} ({error})")
        peers.stop_all()

    skipped = sum(1 for *_, v in rows if v.startswith("skipped"))
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"webconfig: {len(rows)} cells, {len(failures)} failed, {skipped} skipped, "
          f"{time.monotonic() - started_at:.1f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
