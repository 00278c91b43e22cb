"""What the controller needs of whatever moves the traffic: one ``TrafficRouter`` protocol for every engine.

The controller's decisions are the same whatever carries the requests (Flagger's ``router.Interface`` is the
same idea); what differs is kept behind this protocol:

* how a weight change happens: specguard's proxy changes its shares in memory at once (``immediate``), so a
  critical condition seen in a record drops the candidate's share before anything else runs; an engine is told
  over a socket or through a file, and ``set_weights`` returns once it has confirmed;
* how the streams in flight are counted for a rollback's drain: the proxy counts its own; HAProxy counts its
  sessions (``show stat``); a Gateway does not say (``None``), so a rollback's hooks run once the route is applied;
* whether decisions are counted as the proxy's Prometheus metrics (only the proxy exports any).

``candidate`` and ``control`` are fractions of new requests (a step's percent / 100), the baseline taking the
rest; ``step`` is the controller's step index (0-based), recorded with the weights so that an operator can tell
which step a configuration belongs to. A rollback is ``set_weights(0.0, 0.0, step)``. An engine's ``set_weights``
reads the weights back where the engine can say (HAProxy: ``show servers state``) and fails if they did not
take. ``close`` releases whatever the router holds; it does not reset the weights.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from specguard.canary.spec.vocabulary import PoolName

__all__ = ["EngineRouter", "TrafficRouter"]


@runtime_checkable
class TrafficRouter(Protocol):
    """What the controller needs of a traffic router."""

    #: ``set_weights_now`` applies a change synchronously (the proxy); otherwise it is not offered.
    immediate: bool
    #: The pause between two counts of the streams in flight while a rollback drains.
    drain_poll_s: float

    def set_weights_now(self, candidate: float, control: float, step: int) -> None: ...
    async def set_weights(self, candidate: float, control: float, step: int) -> None: ...
    async def in_flight(self) -> dict[PoolName, int] | None: ...
    def count_decision(self, kind: str) -> None: ...
    async def differs(self, candidate: float, control: float) -> str | None:
        """What the engine reports where it differs from these shares, in words; None when it agrees or cannot say.
        Raises ``RuntimeFailure`` when the engine cannot be reached. Read back every window (issue 28)."""
        ...

    def weights_note(self) -> str | None:
        """What an operator must know of the last weights set, when they are not in effect yet (a Gateway route
        written but not applied); None otherwise."""
        ...

    def describe(self) -> str:
        """What carries the traffic, in words for the log: the engine and where it is reached."""
        ...

    async def close(self) -> None: ...


class EngineRouter:
    """What the engines (HAProxy, Gateway API) share: every change confirmed by the engine before it returns,
    no proxy metrics, and no count of streams in flight unless the engine overrides ``in_flight``."""

    immediate = False
    # Each count is one runtime-API command; four a second is plenty to see a stream end.
    drain_poll_s = 0.25

    def set_weights_now(self, candidate: float, control: float, step: int) -> None:
        raise RuntimeError("an engine's weights change through set_weights, which waits for the engine")

    async def in_flight(self) -> dict[PoolName, int] | None:
        """None: the engine does not tell (a Gateway)."""
        return None

    def count_decision(self, kind: str) -> None:
        pass  # no proxy, no proxy metrics: the decisions are in the event log and the state file

    async def differs(self, candidate: float, control: float) -> str | None:
        """None: an engine that cannot be read back overrides nothing here."""
        return None

    def weights_note(self) -> str | None:
        return None
