"""What ``specguard canary status`` prints and the admin API's ``GET /status`` answers: one document, one owner.

Contract (automated checks rely on it; extend, do not rename): ``weight`` (the candidate's share of
traffic in percent, as the steps are written), ``step`` (0-based index into the rollout's steps),
``state`` (running, paused, promoted, rolled_back) and ``decisions`` (each with ``time``, ``kind`` and
``reasons``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specguard.canary.records import CanaryEvent, ControllerState

__all__ = ["status_document"]


def status_document(state: ControllerState, decisions: Sequence[CanaryEvent], requests: Mapping[str, int]) -> dict[str, Any]:
    return {
        "weight": state.percent,
        "step": state.step,
        "state": state.status,
        "windows": state.look,
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
