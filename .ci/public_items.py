"""The count of loopguard's public items, with every feature, against a budget.

Reads rustdoc's `all.html` (every public item rustdoc documents: types, traits, functions,
macros, constants; not methods) from `cargo doc --no-deps -p loopguard --all-features` and
fails when it holds more than BUDGET entries, listing them. A new public item is a decision:
raise the budget in the same change and say why in its message. Also fails when `src/` holds a
`#[doc(hidden)]` item: public API is documented, and a sealed trait's methods live on its
private supertrait.

Run from the repository root after that `cargo doc`: `python3 .ci/public_items.py`.
"""

import pathlib
import re
import sys

BUDGET = 85

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main():
    target = pathlib.Path(__import__("os").environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    page = target / "doc" / "loopguard" / "all.html"
    if not page.exists():
        print(f"public_items: {page} is missing: run cargo doc --no-deps -p loopguard --all-features first")
        return 1
    items = sorted(set(re.findall(r'<li><a href="([^"]+)">', page.read_text())))
    if not items:
        print("public_items: no entries read from all.html (has rustdoc's layout changed?)")
        return 1
    print(f"public_items: {len(items)} public items (budget {BUDGET})")
    hidden = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "src").rglob("*.rs"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "#[doc(hidden)]" in line
    ]
    if hidden:
        print("\n".join(hidden))
        print(f"public_items: {len(hidden)} #[doc(hidden)] items in src/: document them or seal them")
        return 1
    if len(items) > BUDGET:
        print("\n".join(items))
        print(f"public_items: {len(items)} is over the budget of {BUDGET}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
