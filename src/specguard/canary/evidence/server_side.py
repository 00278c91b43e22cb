"""A window judged on the pools' own series, for engines that carry the requests themselves (HAProxy, Gateway).

Behind HAProxy or a Gateway specguard sees no request, so the window's evidence is what the pools' servers
and the engine count: the four latency histograms, the gauges and counters from the metrics source
(``canary.evidence.metrics_source``: each server's ``/metrics``, or Prometheus), and HAProxy's per-server response
counters for the error rate. ``judge_histogram_window`` turns them into the same ``WindowAnalysis`` the proxy's
records give, so that decisions, state, hooks and the event log are the controller's one code path.

One segment, ``all``: vLLM's series carry no segment label (the proxy's segments come from the request).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from specguard.canary.evidence.base import WindowEvidence
from specguard.canary.evidence.gauges import pool_gauges
from specguard.canary.evidence.haproxy_stats import ServerStat, pool_responses
from specguard.canary.evidence.metrics_source import POOL_HISTOGRAMS, PoolMetricsSource, PoolWindow
from specguard.canary.evidence.pool_watch import PoolWatcher
from specguard.canary.judge.decision import CriticalEvent
from specguard.canary.judge.histogram_judge import SegmentHistograms, judge_histogram_window
from specguard.canary.judge.window import AnalysisPolicy
from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.rollout import MetricBudget
from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state.records import ProxiedRequest
from specguard.server_metrics.histograms import Histogram

__all__ = ["CountsReader", "ServerSideEvidence", "response_deltas"]

StatsReader = Callable[[], Awaitable[dict[str, ServerStat]]]
# The engine's cumulative (5xx, all) responses per pool at a unix time (Prometheus, ``metrics.engine_responses``).
CountsReader = Callable[[float], Awaitable[dict[PoolName, tuple[float, float]]]]


def _series(window: PoolWindow | None) -> dict[str, list[list[Histogram]]]:
    """The pool's cumulative histograms at its points, as one series (the source has summed the servers)."""
    if window is None:
        return {}
    return {h: [[p.histograms[h] for p in window.points if h in p.histograms]] for h in POOL_HISTOGRAMS}


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


class ServerSideEvidence:
    """``EvidenceSource`` behind an engine: each window's evidence from the metrics source and the engine, judged.

    ``watcher`` reads the pools' pages at every tick (crashes and restarts); its reads are handed to the metrics
    source, so that with ``metrics: scrape`` one scraper (built with histograms) reads each page once.
    """

    def __init__(
        self,
        source: PoolMetricsSource,
        policy: AnalysisPolicy,
        gauge_budgets: list[MetricBudget],
        watcher: PoolWatcher,
        *,
        haproxy: HAProxyEngine | None = None,
        stats: StatsReader | None = None,
        counts: CountsReader | None = None,
    ) -> None:
        self.source = source
        self.watcher = watcher
        self.policy = policy
        self.gauge_budgets = gauge_budgets
        self.haproxy = haproxy
        self.stats = stats
        self.counts = counts
        self._stats_at_start: dict[str, ServerStat] | None = None
        self._counts_at_start: dict[PoolName, tuple[float, float]] | None = None

    async def read(self) -> list[CriticalEvent]:
        reads = await self.watcher.scraper.read()
        events = self.watcher.observe(reads)
        await self.source.poll(reads)
        return events

    async def begin(self, at: float) -> None:
        """Mark a window's start: the engine's response counters now."""
        if self.stats is not None:
            self._stats_at_start = await self.stats()
        elif self.counts is not None:
            self._counts_at_start = await self.counts(at)

    async def judge(
        self, records: Sequence[ProxiedRequest], start: float, end: float, look: int, *, has_control: bool, percent: float
    ) -> WindowEvidence:
        self.watcher.take_window()  # the watcher's reads served the crash checks; the gauges are the source's
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
        gauges, acceptance = pool_gauges({pool: [w.points] for pool, w in windows.items()})
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
        return WindowEvidence(
            analysis=analysis,
            gauges=gauges,
            acceptance=acceptance,
            counts={pool: n for pool, (_, n) in (responses or {}).items()},
            candidate_requests=candidate_requests,
        )

    async def close(self) -> None:
        await self.source.close()
        await self.watcher.close()
