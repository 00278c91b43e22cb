"""The unit tier starts no process: a test that does fails here and belongs in tests/system/ (README: Tests).

Loopback servers run in-process (aiohttp fakes, ``http.server``) are allowed; a child process is not, whether
``subprocess``, asyncio's subprocess transport (both go through ``Popen._execute_child``) or a bare fork.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def no_child_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    started: list[str] = []

    def refuse(what: str) -> Any:
        def stub(*args: Any, **kwargs: Any) -> Any:
            started.append(what)
            raise AssertionError(f"a unit test started a process ({what}): it belongs in tests/system/")

        return stub

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess"))
    monkeypatch.setattr(os, "fork", refuse("fork"))
    yield
    # Code under test may catch the refusal; the record still fails the test.
    assert started == [], f"a unit test started a process ({', '.join(started)}): it belongs in tests/system/"
