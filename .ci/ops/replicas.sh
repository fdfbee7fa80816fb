#!/usr/bin/env bash
# Several exporter replicas behind a real HAProxy, per balancing and retry policy, at 30, 60,
# 90 and 120 % of capacity, in bursts, with spent budgets and with a replica down
# (.ci/ops/replicas.py says how). Installs haproxy (Debian's package) when missing; builds
# the release exporter like .ci/ops/prometheus_scenarios.py ($LOOPGUARD_EXPORTER skips it).
# Everything listens on 127.0.0.1, runs in the foreground and is killed when this ends; the
# whole run is bounded by `timeout`. Run from anywhere: `bash .ci/ops/replicas.sh --json`.
# Arguments go to replicas.py (`--short` for CI's short version).
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v haproxy >/dev/null 2>&1; then
    echo "installing Debian's haproxy package" >&2
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null || echo "apt-get update failed; trying the cached lists" >&2
        apt-get install -y -qq --no-install-recommends haproxy >/dev/null
    else
        echo "replicas: haproxy missing and cannot be installed (not root or no apt-get)" >&2
        exit 1
    fi
fi
haproxy -v | sed -n 1p >&2  # sed reads it all: no SIGPIPE under pipefail

export PYTHONDONTWRITEBYTECODE=1
# A hard bound on top of replicas.py's own watchdog; SIGTERM first, so it kills its children.
exec timeout --kill-after=15 "${REPLICAS_TIMEOUT_S:-1800}" python3 .ci/ops/replicas.py "$@"
