"""Shared fixtures. Each real vLLM server is started once per test session and stopped at its end."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specguard.embedded.arctic_suffix import BUILD_HINT, arctic_suffix_dir, import_arctic_cache
from specguard.embedded.models import ModelSet, ensure_models
from specguard.embedded.runtime import VllmRuntime, ensure_runtime
from specguard.embedded.servers import embedded_server, embedded_spec
from specguard.scripted.process import ScriptedProcess
from specguard.scripted.server import Script
from specguard.vllm.process import ManagedServer

SYSTEM_TIER = Path(__file__).parent / "system"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tier by folder: every test under tests/system/ is marked ``system`` (README: Tests).

    Then tests without vLLM first: quick feedback, and the timing checks run before any vLLM server is up.
    """
    for item in items:
        if item.path.is_relative_to(SYSTEM_TIER):
            item.add_marker(pytest.mark.system)
    items.sort(key=lambda item: item.get_closest_marker("vllm") is not None)


@pytest.fixture(scope="session")
def runtime() -> VllmRuntime:
    return ensure_runtime()


@pytest.fixture(scope="session")
def models(runtime: VllmRuntime) -> ModelSet:
    return ensure_models(runtime)


@pytest.fixture(scope="session")
def arctic_suffix_cache() -> Any:
    """Arctic Inference's own SuffixDecodingCache class, as scripts/setup.sh builds it from the sdist."""
    found = import_arctic_cache(prefer_built=True)
    if found is None:
        pytest.fail(f"Arctic Inference's suffix cache is not built in {arctic_suffix_dir()}: {BUILD_HINT}")
    return found[0]


@pytest.fixture(scope="session")
def vllm_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-logs")


@pytest.fixture(scope="session")
def vllm_servers(runtime: VllmRuntime, models: ModelSet, vllm_logs: Path) -> Iterator[dict[str, ManagedServer]]:
    """A baseline and an n-gram server, started together (about a minute on 2 cores)."""
    servers = {k: embedded_server(runtime, embedded_spec(models, k), k, vllm_logs) for k in ("baseline", "ngram")}
    try:
        for s in servers.values():
            s.start()
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(ManagedServer.wait_ready, servers.values()))
        yield servers
    finally:
        for s in servers.values():
            s.stop()


@dataclass(frozen=True)
class DemoRun:
    """What one ``make demo`` printed, and the run directory it wrote."""

    result: subprocess.CompletedProcess[str]
    out: Path


@pytest.fixture(scope="session")
def demo_run(runtime: VllmRuntime, models: ModelSet) -> DemoRun:
    """``make demo`` as the README says, once per session: four real servers started one after the other.

    Its run is the README test's subject and the launched-arms test's evidence (about 7 minutes on 2 cores,
    the suite's longest step: run twice, it was 159 s more for a second, smaller launched check).
    """
    root = Path(__file__).resolve().parents[1]
    before = set((root / "runs").glob("demo-*")) if (root / "runs").exists() else set()
    result = subprocess.run(
        ["make", "demo"], cwd=root, capture_output=True, text=True, timeout=1200, env={**os.environ, "COLUMNS": "200"}
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (out,) = set((root / "runs").glob("demo-*")) - before
    return DemoRun(result=result, out=out)


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[callable]:
    started: list[ScriptedProcess] = []

    def start(**script: object) -> ScriptedProcess:
        proc = ScriptedProcess(Script(**script), tmp_path / f"scripted-{len(started)}")
        started.append(proc)
        proc.__enter__()
        return proc

    yield start
    for p in started:
        p.stop()
