"""A running Prometheus's HTTP API, for the CI scripts that start one (.ci/ops, .ci/webconfig).

Standard library only.
"""

import json
import urllib.parse
import urllib.request


class PrometheusApi:
    """Mixed into a class that started Prometheus on 127.0.0.1:`self.port`."""

    def ready(self):
        """Whether /-/ready answers 200 (False while it is starting or gone)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path, **params):
        """The `data` of /api/v1/`path`?`params`; anything but `"status": "success"` raises."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]
