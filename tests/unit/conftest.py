"""The unit tier starts no process and connects nowhere but loopback: a test that does fails here and belongs in
tests/system/ (README: Tests).

Loopback servers run in-process (aiohttp fakes, ``http.server``) are allowed; a child process is not, whether
``subprocess``, asyncio's subprocess transport (both go through ``Popen._execute_child``) or a bare fork, and
neither is a connection to any address but loopback's.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


def _loopback(address: Any) -> bool:
    if not isinstance(address, tuple):
        return True  # a Unix socket's path: on this machine
    host = str(address[0])
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def process_and_network_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    refused: list[str] = []

    def refuse(what: str) -> Any:
        def stub(*args: Any, **kwargs: Any) -> Any:
            refused.append(what)
            raise AssertionError(f"a unit test started {what}: it belongs in tests/system/")

        return stub

    def guarded(connect: Any) -> Any:
        def stub(self: socket.socket, address: Any) -> Any:
            if not _loopback(address):
                refused.append(f"a connection to {address!r}")
                raise AssertionError(f"a unit test connected to {address!r}: it belongs in tests/system/")
            return connect(self, address)

        return stub

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("a process"))
    monkeypatch.setattr(os, "fork", refuse("a fork"))
    monkeypatch.setattr(socket.socket, "connect", guarded(socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guarded(socket.socket.connect_ex))
    yield
    # Code under test may catch the refusal; the record still fails the test.
    assert refused == [], f"a unit test started {', '.join(refused)}: it belongs in tests/system/"
