"""What the controller needs of a window's evidence, whichever backend gives it: one ``EvidenceSource`` protocol.

Argo Rollouts' metric ``Provider`` is the same idea: the controller asks one interface and never which backend
answers. Two implementations: ``records.RecordsEvidence`` (specguard's proxy measured every request; the pools'
``/metrics`` add gauges) and ``server_side.ServerSideEvidence`` (behind HAProxy or a Gateway: the pools' own
histograms, gauges and counters from ``/metrics`` or Prometheus, and the engine's response counters). Both
watch the pools' pages for crashes and restarts (``read``) and give the same ``WindowEvidence``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specguard.canary.judge.decision import CriticalEvent
from specguard.canary.judge.window import WindowAnalysis
from specguard.canary.state.records import ProxiedRequest

__all__ = ["EvidenceSource", "WindowEvidence"]


@dataclass
class WindowEvidence:
    """A judged window: the analysis, and the figures the event log keeps beside it."""

    analysis: WindowAnalysis
    gauges: dict[str, dict[str, float]]
    acceptance: dict[str, float | None]
    # Responses per pool the engine counted (HAProxy's or Prometheus' counters); the proxy's records are
    # counted by the controller itself.
    counts: dict[str, int] = field(default_factory=dict)
    # The candidate's requests the engine saw in the window, for the step's minimum (the records' own are
    # counted by the controller).
    candidate_requests: int = 0


class EvidenceSource(Protocol):
    """What the controller reads each window through."""

    async def begin(self, at: float) -> None:
        """Mark the first window's start (an engine's response counters now)."""

    async def read(self) -> list[CriticalEvent]:
        """One read of the pools at the controller's tick: the critical conditions it reveals (crash, restart)."""

    async def judge(
        self, records: Sequence[ProxiedRequest], start: float, end: float, look: int, *, has_control: bool, percent: float
    ) -> WindowEvidence:
        """The window ``[start, end]`` judged; ``records`` are the proxy's (none behind an engine)."""

    async def close(self) -> None: ...
