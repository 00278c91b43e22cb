"""The canary report's data: everything `specguard canary report` shows, finished, so that renderers only render.

Built once by ``report.build.canary.build_canary_report_data`` from the controller's state, its event log, the
proxied requests and the pools' inventories; ``render_canary_markdown`` and ``render_canary_html`` are pure
functions of it: they read no file and compute no statistic (they only format numbers, NaN and None as "-").
Times are given both as Unix seconds (for charts) and as UTC text (for tables), so no renderer converts them;
steps are numbered from 1, as people count them (the log's 0-based index + 1).
"""

from __future__ import annotations

from pydantic import BaseModel

from specguard.results.models import Percentiles

__all__ = [
    "CanaryReportData",
    "DecisionRow",
    "HookRow",
    "InventoryTable",
    "MetricRow",
    "PoolStats",
    "WeightPoint",
    "WindowRow",
]


class WeightPoint(BaseModel):
    """The candidate's share from ``time`` on, and what set it (an event's kind and decision, or the state)."""

    time_unix: float
    time_utc: str  # for tables: "2025-01-02 03:04:05 UTC"
    time_iso: str  # for a chart's date axis: "2025-01-02 03:04:05" (UTC)
    step: int  # 1-based
    percent: float
    cause: str


class MetricRow(BaseModel):
    """One segment x metric of one window: the ratio and its interval, the test against this look's threshold."""

    segment: str
    metric: str
    verdict: str
    comparison: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    threshold: float
    budget: float
    budget_text: str  # "10 %" for a ratio, "+0.5 points" for the error rate
    n_baseline: int
    n_candidate: int
    baseline_value: float | None
    candidate_value: float | None
    values_text: str  # "baseline / candidate": percentiles in ms, or the two error rates
    text: str


class WindowRow(BaseModel):
    """One analysed window: its verdict, comparison, the pools' counts and gauges, its per-metric rows."""

    look: int
    start_utc: str
    end_utc: str
    start_unix: float
    end_unix: float
    step: int  # 1-based
    percent: float
    verdict: str
    comparison: str
    alpha_look: float
    counts: dict[str, int]
    acceptance: dict[str, float | None]
    gauges: dict[str, dict[str, float | None]]
    warnings: list[str]
    results: list[MetricRow]


class DecisionRow(BaseModel):
    """A decision, manual action, critical condition, start or stop, with the reasons given for it."""

    seq: int
    time_utc: str
    kind: str  # the event's kind
    decision: str | None
    step: int  # 1-based
    percent: float
    by: str | None  # who asked, for manual actions
    reasons: list[str]


class HookRow(BaseModel):
    """One run of a hook command; ``failed`` when it exited non-zero, timed out or never exited."""

    time_utc: str
    phase: str
    argv: list[str]
    attempt: int
    exit_code: int | None
    timed_out: bool
    duration_s: float | None
    failed: bool
    stdout_tail: str
    stderr_tail: str


class PoolStats(BaseModel):
    """One pool over the whole rollout, from the proxy's records: counts, errors, latency percentiles (ms)."""

    pool: str
    attempts: int
    client_requests: int  # attempts the client received (not retried elsewhere)
    errors: int
    error_rate: float | None
    retried: int  # attempts that failed before the first byte and went on to the baseline
    disconnected: int
    errors_by_message: dict[str, int]
    ttft_ms: Percentiles
    itl_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles


class InventoryTable(BaseModel):
    """One pool's (or server's) inventory as key / value rows; nested keys joined with dots."""

    name: str
    rows: list[tuple[str, str]]


class CanaryReportData(BaseModel):
    rollout_name: str
    status: str  # running, paused, promoted, rolled_back
    step: int  # 1-based
    steps: int
    percent: float
    step_percents: list[float]
    created_utc: str
    updated_utc: str
    summary: str  # the outcome in plain words, with the numbers that decided it
    weight: list[WeightPoint]  # every event's weight in order, then the state's
    weight_changes: list[WeightPoint]  # the points where the weight changed (the first included)
    windows: list[WindowRow]
    decisions: list[DecisionRow]
    hooks: list[HookRow]
    failed_hooks: int
    pools: list[PoolStats]
    inventories: list[InventoryTable]
    error_control: str
    definitions: dict[str, str]
