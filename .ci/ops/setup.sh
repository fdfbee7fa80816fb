#!/usr/bin/env bash
# Tools for the ops checks: Debian's prometheus package (prometheus + promtool) and a venv
# with the pinned manifest validators. Idempotent; prints what it did. Run from the root.
# Writes the venv's python path to "$OPS_VENV/python-path" for the caller.
set -euo pipefail
OPS_VENV="${OPS_VENV:-${CARGO_TARGET_DIR:-target}/ops-venv}"

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    echo "installing Debian's prometheus package (prometheus, promtool)"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        # The package's service is never started here (no init system; policy-rc.d).
        apt-get update -qq >/dev/null || echo "apt-get update failed; trying the cached lists"
        apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
            || echo "apt-get install prometheus failed"
    else
        echo "not root or no apt-get: cannot install prometheus"
    fi
fi
if command -v promtool >/dev/null 2>&1; then
    prometheus --version 2>&1 | head -1
else
    echo "prometheus/promtool unavailable: promtool checks and Prometheus scenarios will be skipped"
fi

python="$OPS_VENV/bin/python"
stamp="$OPS_VENV/requirements.txt"
if [ ! -x "$python" ] || ! cmp -s .ci/ops/requirements.txt "$stamp"; then
    echo "creating $OPS_VENV with .ci/ops/requirements.txt"
    rm -rf "$OPS_VENV"
    python3 -m venv "$OPS_VENV"
    "$python" -m pip install --quiet --disable-pip-version-check -r .ci/ops/requirements.txt
    cp .ci/ops/requirements.txt "$stamp"
fi
"$python" -c "import kubernetes_validate, cloudcoil.models.keda, yaml; print('validators ready')"
