"""pyproject.toml's ranges and constraints/ci.txt's pins agree: CI tests versions the ranges admit, floors included."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parent.parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins() -> dict[str, Version]:
    lines = (ROOT / "constraints" / "ci.txt").read_text().splitlines()
    pairs = [line.split("==", 1) for line in lines if "==" in line and not line.startswith("#")]
    return {canonicalize_name(name): Version(version) for name, version in pairs}


def _requirements() -> list[Requirement]:
    texts = PROJECT["dependencies"] + [r for extra in PROJECT["optional-dependencies"].values() for r in extra]
    return [Requirement(t) for t in texts]


def test_every_requirement_is_pinned_inside_its_range() -> None:
    pins = _pins()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} has no pin in constraints/ci.txt"
        assert req.specifier.contains(pins[name]), f"constraints/ci.txt pins {name} {pins[name]}, outside {req}"


def test_ranges_have_floors_and_specguard_itself_is_not_pinned() -> None:
    for req in _requirements():
        assert any(s.operator == ">=" for s in req.specifier), f"{req}: a range starts at the tested version"
    assert "specguard" not in _pins()


def test_uvloop_is_left_out_on_windows_and_linux_is_declared() -> None:
    (uvloop,) = [r for r in _requirements() if r.name == "uvloop"]
    assert uvloop.marker is not None
    assert not uvloop.marker.evaluate({"sys_platform": "win32"}) and uvloop.marker.evaluate({"sys_platform": "linux"})
    assert "Operating System :: POSIX :: Linux" in PROJECT["classifiers"]
