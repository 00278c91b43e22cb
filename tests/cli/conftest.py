"""Fixtures of the bad-input tests: the CLI driven in-process, with nothing able to leave the test.

Every test runs with ``SPECGUARD_HOME`` and the working directory in its own
``tmp_path``, and with a guard that records (and refuses) any connection, any
child process, any load run and any embedded runtime or model set. A failure
must leave the guard empty and the files under ``tmp_path`` as they were.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import Cli, Guard


@pytest.fixture(autouse=True)
def guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Guard:
    import specguard.check.launchers.embedded as embedded_launch
    import specguard.check.runner as check_runner
    import specguard.embedded.models as embedded_models
    import specguard.embedded.runtime as embedded_runtime
    import specguard.loadgen.runner as loadgen_runner

    g = Guard()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("SPECGUARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECGUARD_DEBUG", raising=False)

    def refuse(what: str, exc: type[BaseException] = RuntimeError):  # type: ignore[no-untyped-def]
        def stub(*args: Any, **kwargs: Any) -> Any:
            for a in args:
                if hasattr(a, "close") and type(a).__name__ == "coroutine":
                    a.close()
            g.events.append(f"{what}{args[1:2] if what == 'connect' else ''}")
            raise exc(f"the test guard refused {what}")

        return stub

    monkeypatch.setattr(socket.socket, "connect", refuse("connect", ConnectionRefusedError))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connect", ConnectionRefusedError))
    monkeypatch.setattr(subprocess, "Popen", refuse("subprocess", OSError))
    for module in (loadgen_runner, check_runner):
        monkeypatch.setattr(module, "run_async", refuse("run_async"))
    for module in (embedded_runtime, embedded_launch):
        monkeypatch.setattr(module, "ensure_runtime", refuse("ensure_runtime"))
    for module in (embedded_models, embedded_launch):
        monkeypatch.setattr(module, "ensure_models", refuse("ensure_models"))
    return g


@pytest.fixture
def cli(tmp_path: Path, guard: Guard) -> Cli:
    return Cli(tmp_path, guard)
