"""The canary's planes import only what their ``__init__`` says they may (issue 27): a new import across planes
that is not in this table fails here, and the judge stays pure (no I/O module is imported there)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.unit.test_layering import PACKAGE
from tests.unit.test_layering import imported_modules as _imported_modules


@functools.cache
def imported_modules(path: Path) -> set[str]:
    return _imported_modules(path)  # each file parsed once for all the tests here


CANARY = PACKAGE / "canary"
# plane -> the other planes (or single modules) of the canary it may import; control may import every plane.
MAY_IMPORT: dict[str, set[str]] = {
    "spec": set(),
    "state": {"spec"},
    "proxy": {"spec", "state"},
    "judge": {"spec", "state"},
    "observability": {"spec"},
    "evidence": {"spec", "state", "proxy", "judge", "observability"},
    # control.hooks: the Gateway router's `kubectl apply` runs through the hooks' argument-list runner.
    "routers": {"spec", "proxy", "evidence", "control.hooks"},
    "notify": {"spec", "state", "observability"},
    "ops": {"spec", "proxy", "routers"},
}
IO_MODULES = ("aiohttp", "asyncio", "socket", "sqlite3", "subprocess", "urllib", "specguard.canary.state.store")


def canary_imports(plane: str) -> dict[str, set[str]]:
    """Module (relative to canary/) -> the canary modules it imports, as ``plane.module``."""
    target = CANARY / plane
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert files, f"nothing at {target}"
    prefix = "specguard.canary."
    return {str(f.relative_to(CANARY)): {n[len(prefix) :] for n in imported_modules(f) if n.startswith(prefix)} for f in files}


@pytest.mark.parametrize("plane", sorted(MAY_IMPORT))
def test_a_plane_imports_only_the_planes_below_it(plane: str) -> None:
    allowed = MAY_IMPORT[plane]
    own = plane.removesuffix(".py")
    wrong = [
        f"{module} imports specguard.canary.{name}"
        for module, names in canary_imports(plane).items()
        for name in sorted(names)
        if name.split(".")[0] != own and name.split(".")[0] not in allowed and name not in allowed
    ]
    assert wrong == []


def test_every_folder_of_the_canary_is_in_the_table_or_is_control() -> None:
    folders = {p.name for p in CANARY.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == {p for p in MAY_IMPORT if not p.endswith(".py")} | {"control"}


def test_the_judge_does_no_io() -> None:
    io = [
        f"{f.relative_to(CANARY)} imports {name}"
        for f in sorted((CANARY / "judge").rglob("*.py"))
        for name in sorted(imported_modules(f))
        if any(name == m or name.startswith(m + ".") for m in IO_MODULES)
    ]
    assert io == []


def test_the_check_sees_an_import_across_planes() -> None:
    # The table must be able to fail: the control plane imports the proxy, which the judge may not.
    assert any(n.startswith("proxy.") for names in canary_imports("control").values() for n in names)
