"""A window judged on the pools' own series, for engines that carry the requests themselves (HAProxy, Gateway).

Behind HAProxy or a Gateway specguard sees no request, so the window's evidence is what the pools' servers
and the engine count: the four latency histograms, the gauges and counters from the metrics source
(``canary.evidence.metrics_source``: each server's ``/metrics``, or Prometheus), and HAProxy's per-server response
counters for the error rate. ``judge_histogram_window`` turns them into the same ``WindowAnalysis`` the proxy's
records give, so that decisions, state, hooks and the event log are the controller's one code path.

One segment, ``all``: vLLM's series carry no segment label (the proxy's segments come from the request).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from specguard.canary.evidence.haproxy_stats import ServerStat, pool_responses
from specguard.canary.evidence.metrics_source import POOL_GAUGES, POOL_HISTOGRAMS, PoolMetricsSource, PoolWindow
from specguard.canary.judge.histogram_judge import SegmentHistograms, judge_histogram_window
from specguard.canary.judge.window import AnalysisPolicy, WindowAnalysis
from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.rollout import MetricBudget
from specguard.canary.spec.vocabulary import PoolName
from specguard.server_metrics.histograms import Histogram

__all__ = ["CountsReader", "ServerSideWindow", "ServerSideWindows", "response_deltas", "window_pool_gauges"]

StatsReader = Callable[[], Awaitable[dict[str, ServerStat]]]
# The engine's cumulative (5xx, all) responses per pool at a unix time (Prometheus, ``metrics.engine_responses``).
CountsReader = Callable[[float], Awaitable[dict[PoolName, tuple[float, float]]]]


def _series(window: PoolWindow | None) -> dict[str, list[list[Histogram]]]:
    """The pool's cumulative histograms at its points, as one series (the source has summed the servers)."""
    if window is None:
        return {}
    return {h: [[p.histograms[h] for p in window.points if h in p.histograms]] for h in POOL_HISTOGRAMS}


def window_pool_gauges(windows: Mapping[PoolName, PoolWindow]) -> tuple[dict[str, dict[str, float]], dict[str, float | None]]:
    """Per pool: each gauge's mean over the window's points, its preemptions, and its spec-decode acceptance rate
    (the same figures ``pool_watch.window_gauges`` gives from direct reads)."""
    gauges: dict[str, dict[str, float]] = {}
    rates: dict[str, float | None] = {}
    for pool, w in windows.items():
        per: dict[str, float] = {}
        for g in POOL_GAUGES:
            values = [p.gauges[g] for p in w.points if g in p.gauges]
            if values:
                per[g] = sum(values) / len(values)
        preempted = w.counter_delta("preemptions")
        if preempted is not None:
            per["preemptions"] = preempted
        gauges[pool] = per
        drafted, accepted = w.counter_delta("spec_draft_tokens"), w.counter_delta("spec_accepted_tokens")
        rates[pool] = accepted / drafted if drafted and accepted is not None else None
    return gauges, rates


def response_deltas(
    before: Mapping[PoolName, tuple[float, float]], after: Mapping[PoolName, tuple[float, float]]
) -> dict[str, tuple[int, int]]:
    """The window's (5xx, all) per pool; a counter that fell (the engine restarted) counts from zero."""
    out: dict[str, tuple[int, int]] = {}
    for pool, (errors, total) in after.items():
        b_errors, b_total = before.get(pool, (0.0, 0.0))
        fell = errors < b_errors or total < b_total
        out[pool] = (round(errors - (0 if fell else b_errors)), round(total - (0 if fell else b_total)))
    return out


@dataclass
class ServerSideWindow:
    analysis: WindowAnalysis
    gauges: dict[str, dict[str, float]]
    acceptance: dict[str, float | None]
    responses: dict[str, tuple[int, int]] | None
    # The candidate's requests in the window, for the step's minimum: HAProxy's response count, else the
    # requests the candidate's servers finished (the E2E histogram's count).
    candidate_requests: int = 0
    points: dict[str, int] = field(default_factory=dict)  # per pool: how many metric points the window held


class ServerSideWindows:
    """Reads each window's evidence from the metrics source and the engine, and judges it."""

    def __init__(
        self,
        source: PoolMetricsSource,
        policy: AnalysisPolicy,
        gauge_budgets: list[MetricBudget],
        *,
        haproxy: HAProxyEngine | None = None,
        stats: StatsReader | None = None,
        counts: CountsReader | None = None,
    ) -> None:
        self.source = source
        self.policy = policy
        self.gauge_budgets = gauge_budgets
        self.haproxy = haproxy
        self.stats = stats
        self.counts = counts
        self._stats_at_start: dict[str, ServerStat] | None = None
        self._counts_at_start: dict[PoolName, tuple[float, float]] | None = None

    async def poll(self) -> None:
        await self.source.poll()

    async def begin(self, at: float) -> None:
        """Mark a window's start: the engine's response counters now."""
        if self.stats is not None:
            self._stats_at_start = await self.stats()
        elif self.counts is not None:
            self._counts_at_start = await self.counts(at)

    async def judge(self, start: float, end: float, look: int, *, has_control: bool) -> ServerSideWindow:
        windows = await self.source.window(start, end)
        responses: dict[str, tuple[int, int]] | None = None
        if self.stats is not None and self.haproxy is not None and self._stats_at_start is not None:
            now = await self.stats()
            responses = {k: v for k, v in pool_responses(self.haproxy, self._stats_at_start, now).items()}
            self._stats_at_start = now
        elif self.stats is not None:
            self._stats_at_start = await self.stats()
        elif self.counts is not None:
            now_counts = await self.counts(end)
            if self._counts_at_start is not None:
                responses = response_deltas(self._counts_at_start, now_counts)
            self._counts_at_start = now_counts
        segment = SegmentHistograms(
            baseline=_series(windows.get("baseline")),
            candidate=_series(windows.get("candidate")),
            control=_series(windows.get("control")) if has_control else None,
        )
        gauges, acceptance = window_pool_gauges(windows)
        errors = {pool: (float(e), float(n)) for pool, (e, n) in responses.items()} if responses is not None else None
        analysis = judge_histogram_window(
            self.policy,
            {"all": segment},
            look,
            errors=errors,
            gauge_budgets=self.gauge_budgets,
            gauges=gauges,
            seed=look,
        )
        if responses is not None:
            candidate_requests = responses.get("candidate", (0, 0))[1]
        else:
            cand = windows.get("candidate")
            e2e = cand.histogram_delta("e2e") if cand is not None else None
            candidate_requests = int(e2e.count) if e2e is not None else 0
        return ServerSideWindow(
            analysis=analysis,
            gauges=gauges,
            acceptance=acceptance,
            responses=responses,
            candidate_requests=candidate_requests,
            points={pool: len(w.points) for pool, w in windows.items()},
        )

    async def close(self) -> None:
        await self.source.close()
