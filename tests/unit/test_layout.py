"""The Layout page (docs/layout.md) matches the tree: every package and top-level module is listed, nothing listed is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "specguard"


def layout_block() -> list[list[str]]:
    """The entries directly under src/specguard/ in docs/layout.md's tree, top to bottom, one list per line."""
    text = (ROOT / "docs" / "layout.md").read_text()
    block = text.split("# Layout", 1)[1].split("```", 2)[1]
    lines: list[list[str]] = []
    for line in block.splitlines():
        if not line.startswith("  ") or line.startswith("   "):
            continue  # only the entries directly under src/specguard/
        first = line.split("  ")[1]
        lines.append([n.strip() for n in re.split(r",\s*", first.strip()) if n.strip()])
    return lines


def layout_names() -> set[str]:
    return {name for line in layout_block() for name in line}


def tree_names() -> set[str]:
    packages = {f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    modules = {p.name for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py", "__main__.py"}}
    return packages | modules


def test_every_package_and_module_is_in_the_layout_and_nothing_else() -> None:
    listed, present = layout_names(), tree_names()
    assert present - listed == set(), "in src/specguard but not in docs/layout.md"
    assert listed - present == set(), "in docs/layout.md but not in src/specguard"
