"""The two peers given the same web config file: Debian's node_exporter and the example.

node_exporter cannot listen on port 0 and say which port it took: a free port is found by
binding 127.0.0.1:0 and releasing it, and a start that loses the port to another process
("address already in use") is retried on a new one. The example listens on 127.0.0.1:0 and
prints `listening on http://ADDR`.
"""

import queue
import re
import subprocess
import threading

from procs import free_port, stop

START_TIMEOUT = 15
children = []


class StartFailed(Exception):
    """A peer exited, or never said it listens; the message holds its log."""


class Refused(StartFailed):
    """The peer refused the file at start (its own words in the message)."""


def stop_all():
    for proc in children:
        stop(proc)


class Peer:
    """A started process, its address, and what it wrote (stdout and stderr, merged)."""

    def __init__(self, name, cmd, ready):
        """`ready(line)`: the address the line says the peer listens on, or None."""
        self.name = name
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True)
        children.append(self.proc)
        self.lines = []
        found = queue.Queue()

        def drain():  # reads every line, so a chatty peer never blocks on a full pipe
            for line in self.proc.stdout:
                self.lines.append(line)
                addr = ready(line)
                if addr:
                    found.put(addr)
            found.put(None)  # exited

        threading.Thread(target=drain, daemon=True).start()
        try:
            self.addr = found.get(timeout=START_TIMEOUT)
        except queue.Empty:
            self.addr = None
        if self.addr is None:
            stop(self.proc)
            raise StartFailed(f"`{' '.join(map(str, cmd))}` (exit {self.proc.returncode}): {self.output()}")

    def output(self):
        return "".join(self.lines)

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        stop(self.proc)


def node_exporter(binary, web_config, tries=5):
    """Debian's node_exporter on a free loopback port, with `web_config`; most collectors
    off so that it starts and answers fast. Retries a port another process took."""
    for _ in range(tries):
        port = free_port()
        cmd = [binary, f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={web_config}",
               "--collector.disable-defaults", "--collector.time", "--log.level=info"]

        # exporter-toolkit logs "TLS is enabled." or "TLS is disabled." once it serves.
        def ready(line, port=port):
            return f"127.0.0.1:{port}" if re.search(r"TLS is (en|dis)abled", line) else None

        try:
            return Peer("node_exporter", cmd, ready)
        except StartFailed as failed:
            if "address already in use" not in str(failed):
                raise
    raise StartFailed(f"node_exporter: no free port in {tries} tries")


def example(binary, web_config):
    """The exporter example on 127.0.0.1:0 with `web_config`. `Refused` when it stops at
    start naming `tls_server_config` (built without TLS)."""
    cmd = [binary, "--listen", "127.0.0.1:0", "--web.config.file", str(web_config),
           "--series", "100", "--cardinality-interval-ms", "0"]

    def ready(line):
        m = re.match(r"listening on https?://(\S+)", line)
        return m.group(1) if m else None

    try:
        return Peer("example", cmd, ready)
    except StartFailed as failed:
        if "tls_server_config" in str(failed):
            raise Refused(str(failed)) from None
        raise
