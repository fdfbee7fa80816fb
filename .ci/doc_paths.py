"""README.md and CHANGELOG.md name only public paths that exist.

Reads rustdoc's output for loopguard (`cargo doc --no-deps -p loopguard --all-features`,
redirect pages skipped) and checks two kinds of names written in backticks:

- a full path, `loopguard::module::Item` or `loopguard::module::Item::member`;
- `Type::member` where `Type` is one of loopguard's public types, traits or enums: the
  member (method, variant, associated constant or type) exists on some such type.

CHANGELOG.md is checked except the "old" column of its migration tables and its released
sections (they name what was). Run from the repository root after that `cargo doc`:
`python3 .ci/doc_paths.py`. Ends with "doc_paths: N names checked, N missing".
"""

import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TICKS = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"^(?:loopguard::)?(?:[a-z_][a-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)?")
MEMBER_IDS = re.compile(r'id="(?:method|tymethod|variant|associatedconstant|associatedtype|structfield)\.([A-Za-z0-9_]+)"')


def index(doc):
    """Public item paths (`module::Item`) and each type name's members."""
    paths, members = set(), {}
    for page in doc.rglob("*.html"):
        rel = page.relative_to(doc)
        stem = rel.name
        if stem in ("index.html", "all.html") or "." not in stem[:-5]:
            if stem == "index.html" and "Redirecting" not in page.read_text()[:500]:
                paths.add("::".join(rel.parts[:-1]))
            continue
        text = page.read_text()
        if "Redirecting to" in text[:500]:
            continue
        kind, name = stem[:-5].split(".", 1)
        modules = list(rel.parts[:-1])
        paths.add("::".join(modules + [name]))
        if kind in ("struct", "enum", "trait", "union", "type"):
            found = set(MEMBER_IDS.findall(text))
            members.setdefault(name, set()).update(found)
            for m in found:
                paths.add("::".join(modules + [name, m]))
    return paths, members


def names(text):
    for tick in TICKS.findall(text):
        m = NAME.match(tick.strip())
        if m and "::" in m.group(0):
            yield m.group(0)


def current_changelog(text):
    """The unreleased part of the CHANGELOG, without the migration table's "old" column."""
    released = re.search(r"^## \[?\d", text, re.M)
    text = text[: released.start()] if released else text
    out = []
    for line in text.splitlines():
        if line.lstrip().startswith("|") and line.count("|") >= 3:
            line = line.split("|")[2]  # | old | new |: keep "new"
        out.append(line)
    return "\n".join(out)


def main():
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    doc = target / "doc" / "loopguard"
    if not (doc / "all.html").exists():
        print(f"doc_paths: {doc} is missing: run cargo doc --no-deps -p loopguard --all-features first")
        return 1
    paths, members = index(doc)
    sources = {
        "README.md": (ROOT / "README.md").read_text(),
        "CHANGELOG.md": current_changelog((ROOT / "CHANGELOG.md").read_text()),
    }
    checked, missing = 0, []
    for file, text in sources.items():
        for name in sorted(set(names(text))):
            parts = name.split("::")
            if parts[0] == "loopguard":
                checked += 1
                if "::".join(parts[1:]) not in paths:
                    missing.append(f"{file}: `{name}`")
            elif len(parts) == 2 and parts[0] in members:
                checked += 1
                if parts[1] not in members[parts[0]]:
                    missing.append(f"{file}: `{name}` ({parts[0]} has no member {parts[1]})")
    for m in missing:
        print(f"MISSING: {m}")
    print(f"doc_paths: {checked} names checked, {len(missing)} missing")
    return 1 if missing or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
