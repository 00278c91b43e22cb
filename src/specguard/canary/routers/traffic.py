"""What the controller moves traffic with: specguard's proxy, or a traffic engine's driver, behind one interface.

The controller's decisions are the same whatever carries the requests; only three things differ, and this is
where they are kept apart:

* how a weight change happens: the proxy changes its shares in memory at once (``immediate``), so a critical
  condition seen in a record drops the candidate's share before anything else runs; an engine is told over a
  socket or through a file (``TrafficDriver``), and the call returns once it has confirmed;
* how the streams in flight are counted for a rollback's drain: the proxy counts its own; HAProxy counts its
  sessions (``show stat``); a Gateway does not say, so a rollback's hooks run once the route is applied;
* whether decisions are counted as the proxy's Prometheus metrics (only the proxy exports any).
"""

from __future__ import annotations

from typing import Protocol

from specguard.canary.routers.driver import TrafficDriver
from specguard.canary.routers.haproxy import HAProxyDriver
from specguard.canary.spec.vocabulary import PoolName

__all__ = ["EngineTraffic", "ProxyTraffic", "Traffic", "WeightedProxy"]


class WeightedProxy(Protocol):
    """What the controller needs of the proxy (``canary.proxy.server.CanaryProxy``)."""

    def set_weights(self, candidate: float, control: float, step: int) -> None: ...
    def in_flight(self) -> dict[PoolName, int]: ...
    def count_decision(self, kind: str) -> None: ...


class Traffic(Protocol):
    """``immediate``: ``set_weights_now`` applies a change synchronously (the proxy); otherwise it is not offered."""

    immediate: bool
    #: The pause between two counts of the streams in flight while a rollback drains.
    drain_poll_s: float

    def set_weights_now(self, candidate: float, control: float, step: int) -> None: ...
    async def set_weights(self, candidate: float, control: float, step: int) -> None: ...
    async def in_flight(self) -> dict[PoolName, int] | None: ...
    def count_decision(self, kind: str) -> None: ...


class ProxyTraffic:
    """The built-in proxy: shares change in memory, its own counts of streams in flight."""

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


class EngineTraffic:
    """A traffic engine's driver (HAProxy, Gateway API): every change confirmed by the engine before it returns."""

    immediate = False
    # Each count is one runtime-API command; four a second is plenty to see a stream end.
    drain_poll_s = 0.25

    def __init__(self, driver: TrafficDriver) -> None:
        self.driver = driver

    def set_weights_now(self, candidate: float, control: float, step: int) -> None:
        raise RuntimeError("an engine's weights change through set_weights, which waits for the engine")

    async def set_weights(self, candidate: float, control: float, step: int) -> None:
        await self.driver.set_weights(candidate, control, step)

    async def in_flight(self) -> dict[PoolName, int] | None:
        """HAProxy's session counts; None where the engine does not tell (a Gateway)."""
        if isinstance(self.driver, HAProxyDriver):
            return await self.driver.in_flight()
        return None

    def count_decision(self, kind: str) -> None:
        pass  # no proxy, no proxy metrics: the decisions are in the event log and the state file
