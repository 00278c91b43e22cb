"""The router for ``engine: proxy``: specguard's own proxy, whose shares change in memory at once.

With ``workers: N`` the proxy is the controller's process and N - 1 worker processes (``proxy/workers.py``): a
change is made here at once and sent to every worker, ``set_weights`` returns once every worker has confirmed, the
read-back asks every worker, and the streams in flight are summed over the processes.
"""

from __future__ import annotations

from typing import Protocol

from specguard.canary.proxy.worker_protocol import sum_in_flight
from specguard.canary.spec.vocabulary import PoolName

__all__ = ["ProxyRouter", "ProxyWorkerSet", "WeightedProxy"]


class WeightedProxy(Protocol):
    """What the router needs of the proxy (``canary.proxy.server.CanaryProxy``)."""

    def set_weights(self, candidate: float, control: float, step: int) -> None: ...
    def in_flight(self) -> dict[PoolName, int]: ...
    def count_decision(self, kind: str) -> None: ...


class ProxyWorkerSet(Protocol):
    """What the router needs of the proxy's other processes (``canary.proxy.workers.ProxyWorkers``)."""

    def send_weights(self, candidate: float, control: float, step: int) -> None: ...
    async def set_weights(self, candidate: float, control: float, step: int) -> None: ...
    async def differs(self, candidate: float, control: float) -> str | None: ...
    async def in_flight(self) -> list[dict[PoolName, int]]: ...


class ProxyRouter:
    """The built-in proxy: shares change in memory, its own counts of streams in flight.

    ``close`` leaves the proxy alone: ``canary run`` stops it after its listener has drained.
    """

    immediate = True
    drain_poll_s = 0.05

    def __init__(self, proxy: WeightedProxy, workers: ProxyWorkerSet | None = None) -> None:
        self.proxy = proxy
        self.workers = workers

    def set_weights_now(self, candidate: float, control: float, step: int) -> None:
        self.proxy.set_weights(candidate, control, step)  # checks the shares before any worker is told
        if self.workers is not None:
            self.workers.send_weights(candidate, control, step)

    async def set_weights(self, candidate: float, control: float, step: int) -> None:
        self.proxy.set_weights(candidate, control, step)
        if self.workers is not None:
            await self.workers.set_weights(candidate, control, step)

    async def in_flight(self) -> dict[PoolName, int] | None:
        if self.workers is None:
            return self.proxy.in_flight()
        return sum_in_flight([self.proxy.in_flight(), *await self.workers.in_flight()])

    def count_decision(self, kind: str) -> None:
        self.proxy.count_decision(kind)

    async def differs(self, candidate: float, control: float) -> str | None:
        # One process: the shares are the controller's own memory, nothing to drift. Workers: each one is asked.
        return None if self.workers is None else await self.workers.differs(candidate, control)

    def weights_note(self) -> str | None:
        return None

    def describe(self) -> str:
        return "engine proxy (specguard's own)"

    async def close(self) -> None:
        pass
