"""What the controller and its proxy workers (``workers: N``) say to each other, and how their answers merge. Pure,
but for reading one message off a stream.

Each worker has one Unix socket pair to the controller's process. Messages are pickled tuples behind a 4-byte
length: both ends are specguard's own processes of the same install (the socket pair is never bound to a path), and
pickle carries a ``ProxiedRequest`` without its validation (a record is checked once, by the proxy that made it).

Controller -> worker: ``(CONFIG, WorkerConfig)`` once, then ``(WEIGHTS, id, candidate, control, step)``,
``(READ, id)`` and ``(STOP,)``. Worker -> controller: ``(READY, pid)`` or ``(FAILED, why)`` once, then
``(WEIGHTS, id, candidate, control, step)`` (the weights now in effect, after a ``WEIGHTS`` or a ``READ``),
``(FLIGHT, id, {pool: count})``, ``(RECORDS, [ProxiedRequest, ...])`` and, last, ``(STOPPED, still, cut)``.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.rollout import Split
from specguard.canary.spec.vocabulary import PoolName

__all__ = [
    "CONFIG",
    "FAILED",
    "FLIGHT",
    "READ",
    "READY",
    "RECORDS",
    "STOP",
    "STOPPED",
    "WEIGHTS",
    "WorkerConfig",
    "encode",
    "read_message",
    "sum_in_flight",
    "weights_differ",
]

CONFIG: Final = "config"
READY: Final = "ready"
FAILED: Final = "failed"
WEIGHTS: Final = "weights"
READ: Final = "read"
FLIGHT: Final = "flight"
RECORDS: Final = "records"
STOP: Final = "stop"
STOPPED: Final = "stopped"

_LENGTH = struct.Struct(">I")


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs to serve as the controller's own proxy does."""

    index: int  # 1..count-1 (the controller's process is worker 0)
    count: int
    listen: str
    pools: Mapping[PoolName, Sequence[Upstream]]
    split: Split
    weights: tuple[float, float, int]  # candidate, control, step: in effect before the first request is accepted
    drain_s: float


def encode(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or None when the other end has closed (a worker's controller died, or a worker did)."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        body = await reader.readexactly(_LENGTH.unpack(head)[0])
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    message = pickle.loads(body)  # noqa: S301  our own worker's message over a socket pair no one else holds
    assert isinstance(message, tuple)
    return message


def sum_in_flight(counts: Iterable[Mapping[PoolName, int]]) -> dict[PoolName, int]:
    """Every process's streams in flight, per pool: a rollback drains until the sum is zero."""
    total: dict[PoolName, int] = {}
    for one in counts:
        for pool, n in one.items():
            total[pool] = total.get(pool, 0) + n
    return total


def weights_differ(who: str, reported: tuple[float, float, int], candidate: float, control: float) -> str | None:
    """What a worker reports where its shares are not the controller's, in the words of a drift event; else None."""
    got_candidate, got_control, step = reported
    if got_candidate == candidate and got_control == control:
        return None
    return (
        f"{who} routes candidate {got_candidate * 100:g} %, control {got_control * 100:g} % (step {step + 1}) "
        f"where the controller set {candidate * 100:g} % and {control * 100:g} %"
    )
