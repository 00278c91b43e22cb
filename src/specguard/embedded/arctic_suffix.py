"""Arctic Inference's own ``SuffixDecodingCache`` (C++), built from its PyPI sdist outside any checkout. I/O.

vLLM's ``method="suffix"`` drives ``arctic_inference.suffix_decoding.SuffixDecodingCache``
(arctic-inference==0.1.1, the version vLLM requires; 0.3.0's suffix code is the same).
The full package needs torch to build; its suffix tree does not. So only
``csrc/suffix_decoding`` is compiled (cmake + nanobind 2.9.2, as the sdist's
build pins), and the sdist's ``arctic_inference/suffix_decoding/{__init__,cache}.py``
are laid beside the extension in ``$SPECGUARD_HOME/arctic-suffix-VERSION/``:
importing ``arctic_inference.suffix_decoding`` from there runs Arctic's own
Python wrapper over its own tree. Nothing of the sdist enters the checkout.
This build is specguard's (``assess``, the exactness test and the bench import it); the vLLM
runtime gets the whole package, for its servers, from ``runtime.install_arctic_inference``.

The sdist is fetched with ``pip download`` (the index pip is configured with);
its ``setup.py`` imports torch only to build, so metadata is prepared against
an empty stand-in module. The archive's sha256 is checked against the pin.
A build takes about 20 s on two cores.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from specguard.embedded.runtime import ARCTIC_INFERENCE_VERSION as ARCTIC_VERSION
from specguard.embedded.runtime import ARCTIC_NANOBIND_VERSION as NANOBIND_VERSION
from specguard.embedded.runtime import specguard_home
from specguard.errors import RuntimeFailure

SDIST_SHA256 = {"0.1.1": "36857e2fbe3ead34821a04be98dfab95086050c1e38199c8fdfe308234fdcf63"}
MANIFEST = "specguard-arctic-suffix.json"
BUILD_HINT = "build it with scripts/setup.sh (or: python -m specguard.embedded.arctic_suffix)"


class ArcticBuildError(RuntimeFailure):
    """Arctic's suffix cache could not be fetched or built; the message says which step failed."""


class ArcticSuffixBuild(BaseModel):
    """What was built where, kept beside the extension."""

    arctic_version: str
    sdist_sha256: str
    nanobind_version: str
    python: str
    extension: str


def arctic_suffix_dir(version: str = ARCTIC_VERSION) -> Path:
    return specguard_home() / f"arctic-suffix-{version}"


def _extension_name() -> str:
    return "_C" + str(sysconfig.get_config_var("EXT_SUFFIX"))


def built_extension(version: str = ARCTIC_VERSION) -> Path | None:
    """The extension for this interpreter, if it was built."""
    path = arctic_suffix_dir(version) / "arctic_inference" / "suffix_decoding" / _extension_name()
    return path if path.exists() else None


def _run(argv: list[str], step: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=1800)
    if done.returncode != 0:
        raise ArcticBuildError(f"{step} failed ({' '.join(argv[:4])} ...):\n{(done.stdout + done.stderr)[-3000:]}")


def build_arctic_suffix(
    version: str = ARCTIC_VERSION, log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr)
) -> Path:
    """Fetch, check and build; returns the directory to put on ``sys.path``. Reuses an earlier build."""
    dest = arctic_suffix_dir(version)
    if built_extension(version) is not None:
        return dest
    import hashlib
    import os

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="arctic-suffix-", dir=dest.parent) as tmp_s:
        tmp = Path(tmp_s)
        venv = tmp / "venv"
        log(f"building Arctic Inference {version}'s suffix tree into {dest}")
        _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
        py = str(venv / "bin" / "python")
        pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        need = [f"nanobind=={NANOBIND_VERSION}", "setuptools", "wheel"]
        if shutil.which("cmake") is None:
            need.append("cmake")
        _run([*pip, *need], "pip install nanobind")
        stub = tmp / "stub" / "torch"
        stub.mkdir(parents=True)
        (stub / "__init__.py").write_text("# stand-in: the sdist's setup.py imports torch, metadata needs none\n")
        env = {**os.environ, "PYTHONPATH": str(stub.parent)}
        dl = tmp / "dl"
        argv = [py, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "--no-build-isolation"]
        _run([*argv, f"arctic-inference=={version}", "-d", str(dl)], "pip download arctic-inference", env=env)
        (sdist,) = dl.glob("*.tar.gz")
        digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
        if version in SDIST_SHA256 and digest != SDIST_SHA256[version]:
            raise ArcticBuildError(f"{sdist.name}: sha256 {digest}, expected {SDIST_SHA256[version]}")
        src = tmp / "src"
        with tarfile.open(sdist) as tar:
            tar.extractall(src, filter="data")
        (root,) = src.iterdir()
        build = tmp / "build"
        cmake = shutil.which("cmake", path=str(venv / "bin")) or "cmake"
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(
            [cmake, "-S", str(root / "csrc" / "suffix_decoding"), "-B", str(build), *gen, f"-DPython_EXECUTABLE={py}"]
            + ["-DCMAKE_BUILD_TYPE=Release"],
            "cmake configure",
        )
        _run([cmake, "--build", str(build), "-j", str(os.cpu_count() or 2)], "cmake build")
        (ext,) = build.glob("_C*" + str(sysconfig.get_config_var("EXT_SUFFIX")))
        stage = tmp / "stage"
        pkg = stage / "arctic_inference" / "suffix_decoding"
        pkg.mkdir(parents=True)
        (stage / "arctic_inference" / "__init__.py").write_text("")
        for name in ("__init__.py", "cache.py"):
            shutil.copy(root / "arctic_inference" / "suffix_decoding" / name, pkg / name)
        shutil.copy(ext, pkg / ext.name)
        manifest = ArcticSuffixBuild(
            arctic_version=version,
            sdist_sha256=digest,
            nanobind_version=NANOBIND_VERSION,
            python=sys.version.split()[0],
            extension=ext.name,
        )
        (stage / MANIFEST).write_text(manifest.model_dump_json(indent=2))
        if dest.exists():  # an earlier build for another interpreter: keep its extension
            for old in (dest / "arctic_inference" / "suffix_decoding").glob("_C*"):
                shutil.copy(old, pkg / old.name)
            shutil.rmtree(dest)
        stage.rename(dest)
    log(f"Arctic's SuffixDecodingCache built: {dest}")
    return dest


def import_arctic_cache(prefer_built: bool = False) -> tuple[Any, str] | None:
    """Arctic's ``SuffixDecodingCache`` class and where it came from, or None when neither is there.

    An ``arctic_inference`` installed in this environment comes first (unless ``prefer_built``),
    then the build in ``$SPECGUARD_HOME``.
    """
    if not prefer_built:
        try:
            mod = importlib.import_module("arctic_inference.suffix_decoding")
            return mod.SuffixDecodingCache, f"arctic_inference {getattr(mod, '__file__', '?')}"
        except ImportError:
            pass
    if built_extension() is None:
        return None
    where = str(arctic_suffix_dir())
    if where not in sys.path:
        sys.path.insert(0, where)
    for name in [m for m in sys.modules if m == "arctic_inference" or m.startswith("arctic_inference.")]:
        del sys.modules[name]
    mod = importlib.import_module("arctic_inference.suffix_decoding")
    return mod.SuffixDecodingCache, f"arctic_inference {ARCTIC_VERSION} built in {where}"


def main() -> int:
    try:
        print(build_arctic_suffix())
    except ArcticBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
