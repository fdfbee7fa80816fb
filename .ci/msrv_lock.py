"""Every package in Cargo.lock declares a rust-version no newer than the workspace's.

Reads `cargo metadata --locked --format-version 1` on stdin. Covers dev-dependencies and
other platforms' packages: `cargo test --locked` on the MSRV must find every one usable.
"""

import json
import sys


def version(text):
    return tuple(int(part) for part in (text.split(".") + ["0", "0"])[:3])


meta = json.load(sys.stdin)
members = [p for p in meta["packages"] if p["id"] in meta["workspace_members"]]
msrv = min(version(p["rust_version"]) for p in members)
shown = ".".join(map(str, msrv))
newer = [
    f"{p['name']} {p['version']} needs Rust {p['rust_version']}"
    for p in meta["packages"]
    if p.get("rust_version") and version(p["rust_version"]) > msrv
]
print(f"{len(meta['packages'])} locked packages checked against rust-version {shown}")
if newer:
    sys.exit(
        f"locked versions newer than rust-version {shown} "
        "(`cargo update -p NAME` picks a compatible one):\n  " + "\n  ".join(newer)
    )
