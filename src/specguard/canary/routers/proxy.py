"""The router for ``engine: proxy``: specguard's own proxy, whose shares change in memory at once."""

from __future__ import annotations

from typing import Protocol

from specguard.canary.spec.vocabulary import PoolName

__all__ = ["ProxyRouter", "WeightedProxy"]


class WeightedProxy(Protocol):
    """What the router needs of the proxy (``canary.proxy.server.CanaryProxy``)."""

    def set_weights(self, candidate: float, control: float, step: int) -> None: ...
    def in_flight(self) -> dict[PoolName, int]: ...
    def count_decision(self, kind: str) -> None: ...


class ProxyRouter:
    """The built-in proxy: shares change in memory, its own counts of streams in flight.

    ``close`` leaves the proxy alone: ``canary run`` stops it after its listener has drained.
    """

    immediate = True
    drain_poll_s = 0.05

    def __init__(self, proxy: WeightedProxy) -> None:
        self.proxy = proxy

    def set_weights_now(self, candidate: float, control: float, step: int) -> None:
        self.proxy.set_weights(candidate, control, step)

    async def set_weights(self, candidate: float, control: float, step: int) -> None:
        self.proxy.set_weights(candidate, control, step)

    async def in_flight(self) -> dict[PoolName, int] | None:
        return self.proxy.in_flight()

    def count_decision(self, kind: str) -> None:
        self.proxy.count_decision(kind)

    async def differs(self, candidate: float, control: float) -> str | None:
        return None  # the proxy's shares are the controller's own memory: nothing to drift

    def weights_note(self) -> str | None:
        return None

    def describe(self) -> str:
        return "engine proxy (specguard's own)"

    async def close(self) -> None:
        pass
