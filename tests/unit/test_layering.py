"""Dependencies point downward: the import statements of a package name only the packages below it.

vLLM knowledge (``vllm/``) is shared by preflight, inventory, sizing and the load generator, so it imports
none of them; inventory reads command lines through ``vllm/``, not through preflight; the generic check
runner knows nothing of the embedded default (``embedded/`` resolves ``embedded:`` names before it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "specguard"


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` statement in ``path`` names, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def imports_of(part: str) -> dict[str, set[str]]:
    """Module file (relative to the package) -> what it imports, for a subpackage or one module."""
    target = PACKAGE / part
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert files, f"nothing to read at {target}"
    return {str(f.relative_to(PACKAGE)): imported_modules(f) for f in files}


def offending(part: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{module} imports {name}"
        for module, names in imports_of(part).items()
        for name in sorted(names)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


@pytest.mark.parametrize(
    ("part", "forbidden"),
    [
        ("inventory", ("specguard.preflight",)),
        (
            "vllm",
            (
                "specguard.preflight",
                "specguard.inventory",
                "specguard.sizing",
                "specguard.check",
                "specguard.embedded",
                "specguard.loadgen",
            ),
        ),
        ("check/runner.py", ("specguard.embedded",)),
    ],
)
def test_imports_point_downward(part: str, forbidden: tuple[str, ...]) -> None:
    assert offending(part, forbidden) == []


def test_the_check_finds_an_import_it_forbids() -> None:
    # The check itself must see imports inside functions too (specguard imports lazily in many places).
    assert offending("inventory", ("specguard.vllm",)) != []
