"""What the canary writes down: one record per upstream attempt, the controller's state, and its event log.

These are the file formats of Gate 5 (SQLite rows hold them as JSON; the event log is also JSONL), shared by
the proxy (which produces ``ProxiedRequest``), the store, the controller and the report.

A request's latencies mean exactly what ``bench``'s do (``analysis/definitions.py``), measured at the
proxy's boundary: times are seconds after the proxy sent the request upstream, TTFT to the first chunk
carrying output tokens, E2E to the last, token counts from the server's usage (the proxy asks for it when
the client did not, and strips it from what it forwards).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from specguard.canary.spec.vocabulary import PoolName
from specguard.models_base import StrictModel
from specguard.results.models import TokenSource

__all__ = [
    "CANARY_EVENT_SCHEMA",
    "CANARY_REQUEST_SCHEMA",
    "CanaryEvent",
    "CanaryStatus",
    "ControllerState",
    "EventKind",
    "ProxiedRequest",
]

CANARY_REQUEST_SCHEMA: Final = "specguard.canary_request/1"
CANARY_EVENT_SCHEMA: Final = "specguard.canary_event/1"

CanaryStatus = Literal["running", "paused", "promoted", "rolled_back"]
EventKind = Literal[
    "started",  # the controller started or resumed (details: resumed, weight, step)
    "window",  # a window was analysed (details: the WindowAnalysis, the pools' gauges)
    "decision",  # hold, advance, promote, rollback (details: the Decision)
    "critical",  # a critical condition seen (details: the CriticalEvent)
    "manual",  # pause, resume, promote or rollback asked through the admin API or the CLI
    "hook",  # a hook command ran (details: argv, exit code, output, duration)
    "drift",  # the engine reported other weights than the controller set; re-applied (details: what it reported)
    "engine",  # the engine could not be reached, or was reached again (details: the error, what was done)
    "stopped",  # the controller stopped (details: why, streams drained)
    "annotation",  # a decision's Grafana annotation was not posted (details: for_seq, kind, status, error)
]


class ProxiedRequest(StrictModel):
    """One upstream attempt of one client request, as the proxy measured it.

    A request whose first pool failed before the first byte is retried once on the baseline: that makes two
    records with the same ``request_id``, attempt 1 (``retried``: true, counted against the failing pool)
    and attempt 2 (the one the client received). Client requests = records with ``retried`` false.
    """

    schema_version: Literal["specguard.canary_request/1"] = CANARY_REQUEST_SCHEMA
    seq: int = Field(
        ge=0,
        description="0-based order in which the proxy received client requests; with workers: N, worker k numbers its "
        "own k, k + N, k + 2N, ... (seq % N is the process that served it)",
    )
    request_id: str
    attempt: int = Field(ge=1, le=2)
    retried: bool = Field(description="this attempt failed before the first byte and the request went on to the baseline")
    received_unix: float = Field(description="wall-clock time the proxy received the client's request")
    pool: PoolName
    server: str = Field(description="the upstream base URL")
    step: int = Field(ge=0, description="the rollout step when the request was routed")
    candidate_weight: float = Field(ge=0, le=1)
    segment: str
    api: Literal["completions", "chat"]
    stream: bool
    in_flight: int = Field(ge=0, description="requests in flight on this server when this one was sent, not counting it")
    ok: bool
    error: str | None
    http_status: int | None
    client_disconnected: bool = False
    ttft_s: float | None = Field(description="upstream send -> first chunk carrying output tokens")
    e2e_s: float | None = Field(description="upstream send -> last chunk carrying output tokens (whole response if not streamed)")
    stream_end_s: float | None
    chunk_times_s: list[float] = Field(description="token-bearing chunks, seconds after the upstream send")
    chunk_tokens: list[int]
    token_source: TokenSource | None
    prompt_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None


class ControllerState(StrictModel):
    """The controller's state, enough to resume at the same weight and step after a restart."""

    status: CanaryStatus = "running"
    step: int = Field(default=0, ge=0)
    percent: float = Field(default=0.0, ge=0, le=100, description="the candidate's share now; 0 after a rollback")
    step_started_unix: float
    seconds_in_step: float = Field(
        default=0.0, ge=0, description="time at this step while running (pauses excluded), at updated_unix"
    )
    requests_in_step: int = Field(default=0, ge=0, description="candidate requests at this step")
    look: int = Field(default=0, ge=0, description="windows analysed so far in the rollout")
    windows: list[dict[str, Any]] = Field(default_factory=list, description="decision.WindowRecord dumps, in order")
    updated_unix: float


class CanaryEvent(StrictModel):
    """One line of the append-only event log (SQLite table ``events`` and the JSONL beside it)."""

    schema_version: Literal["specguard.canary_event/1"] = CANARY_EVENT_SCHEMA
    seq: int = Field(ge=0, description="0-based position in the log")
    time: float = Field(description="Unix time")
    kind: EventKind
    decision: Literal["hold", "advance", "promote", "rollback", "pause", "resume"] | None = None
    step: int
    percent: float
    reasons: list[str] = Field(default_factory=list, description="for people; details carry the numbers")
    details: dict[str, Any] = Field(default_factory=dict)
