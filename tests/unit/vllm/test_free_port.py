"""free_port: a launched server's port comes from below the ephemeral range, where outgoing connections never take one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from specguard.vllm import process
from specguard.vllm.process import free_port


def test_ports_come_from_below_the_ephemeral_range_are_bindable_and_never_handed_out_twice() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert all(20000 <= p < low for p in ports), [p for p in ports if not 20000 <= p < low]
    assert len(set(ports)) == len(ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # nothing holds it


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            spare = other.getsockname()[1]
        monkeypatch.setattr(process, "_below_ephemeral", lambda: [taken, spare])
        monkeypatch.setattr(process, "_HANDED_OUT", set())
        monkeypatch.setattr(process.random, "sample", lambda population, k: list(population))
        assert free_port() == spare


def test_without_a_known_range_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(process, "_EPHEMERAL_RANGE", tmp_path / "missing")
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
