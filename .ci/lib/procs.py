"""Child processes of the CI scripts: a free loopback port, and a stop that always ends.

Imported by .ci/ops and .ci/webconfig (each puts this folder on `sys.path` first).
Standard library only.
"""

import signal
import socket
import subprocess


def free_port():
    """A loopback port free right now: for a server (Prometheus, node_exporter) that cannot
    listen on port 0 and say which port it took. Another process may take it before the
    server binds it; a caller that can tell retries on a new one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc):
    """SIGTERM, 10 s to exit, then SIGKILL: a process that ignores SIGTERM still ends."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
