"""What ``specguard canary status`` prints and the admin API's ``GET /status`` answers: one document, one owner.

Contract (automated checks rely on it; extend, do not rename): ``weight`` (the candidate's share of
traffic in percent, as the steps are written), ``step`` (0-based index into the rollout's steps),
``state`` (running, paused, promoted, rolled_back) and ``decisions`` (each with ``time``, ``kind`` and
``reasons``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state.records import CanaryEvent, ControllerState, EventKind
from specguard.canary.state.store import CanaryStore

__all__ = ["read_status", "status_document"]

_DECISIONS: tuple[EventKind, ...] = ("decision",)


def status_document(state: ControllerState, decisions: Sequence[CanaryEvent], requests: Mapping[PoolName, int]) -> dict[str, Any]:
    return {
        "weight": state.percent,
        "step": state.step,
        "state": state.status,
        "windows": len(state.windows),
        "looks": state.look,  # windows that ran a test and spent a share of alpha
        "seconds_in_step": round(state.seconds_in_step, 3),
        "requests_in_step": state.requests_in_step,
        "requests": dict(requests),
        "updated_unix": state.updated_unix,
        "decisions": [
            {"time": e.time, "kind": e.decision, "step": e.step, "weight": e.percent, "reasons": list(e.reasons)}
            for e in decisions
            if e.kind == "decision"
        ],
    }


def read_status(store: CanaryStore, state: ControllerState | None = None) -> dict[str, Any] | None:
    """The status document from a state file (``state`` given: the controller's live state); None before the start."""
    current = state if state is not None else store.load_state()
    if current is None:
        return None
    return status_document(current, store.events(kinds=_DECISIONS), store.request_counts())
