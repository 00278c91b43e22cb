"""Traffic engines: what moves the candidate's share of traffic, chosen by the rollout file's ``engine:`` key.

The built-in proxy splits requests itself; on a fleet, HAProxy or a Kubernetes Gateway already sits in front of
the pools, and specguard drives it instead of putting a second hop in the path. Every engine offers the same two
calls (``TrafficDriver``), so that the analysis, the state, the hooks and the event log stay the one code path
whatever moves the traffic. The models of the ``engine:`` section are in ``spec.engine``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["TrafficDriver"]


@runtime_checkable
class TrafficDriver(Protocol):
    """What the controller needs of a traffic engine.

    ``candidate`` and ``control`` are fractions of new requests (a step's percent / 100), the baseline taking
    the rest; ``step`` is the controller's step index (0-based), recorded with the weights so that an operator
    can tell which step a configuration belongs to. A rollback is ``set_weights(0.0, 0.0, step)``. The call
    returns once the engine has been told (it may apply the change a little later: a Gateway's controller
    reconciles asynchronously). ``close`` releases whatever the driver holds; it does not reset the weights.
    """

    async def set_weights(self, candidate: float, control: float, step: int) -> None: ...

    async def close(self) -> None: ...
