"""Where the canary reads its pools' server-side metrics: each server's ``/metrics``, or the operator's Prometheus.

specguard's proxy sees every request itself; behind HAProxy or a Gateway it sees none, and judges the pools
on their servers' own series instead: gauges (waiting, running, KV usage), counters (spec-decode drafts,
draft and accepted tokens, preemptions, output tokens) and the four latency histograms. Both sources give
one ``PoolWindow`` per pool, the same object whichever read it, so that the judge cannot tell them apart
and a test can hold them against each other (tests/system/test_prometheus_source.py):

- ``ScrapeSource`` reads every server's ``/metrics`` at each ``poll`` (the controller's scrape tick), as
  ``pool_watch`` does, parsed by ``server_metrics.parse`` and ``server_metrics.histograms``;
- ``PrometheusSource`` asks Prometheus for the raw series of the window in one range query per series
  (step = the scrape interval), selected by the ``specguard_pool`` target label, under the names the pools'
  vLLM release exposes (``names.name_for``, as the generated recording rules choose them).

Aggregation is the same on both sides: counters and histograms summed over a pool's servers; a gauge summed
over one server's label sets (KV usage: averaged, it is a fraction) and then averaged over the servers, as
the rollout's budgets compare them per server. In PromQL the server is the ``instance`` target label.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from pydantic import Field

from specguard.canary.evidence.gauges import POOL_GAUGES
from specguard.canary.evidence.scrape import PageRead, PoolScraper
from specguard.canary.observability.conventions import POOL_LABEL
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.vocabulary import PoolName
from specguard.models_base import StrictModel
from specguard.server_metrics import names
from specguard.server_metrics.histograms import Histogram, histogram_delta, merge_histograms
from specguard.server_metrics.prometheus_api import PrometheusApi, Series
from specguard.vllm.knowledge import Version

__all__ = [
    "POOL_COUNTERS",
    "POOL_GAUGES",
    "POOL_HISTOGRAMS",
    "MetricsSourceKind",
    "PoolMetricsSource",
    "PoolPoint",
    "PoolWindow",
    "PrometheusSource",
    "ScrapeSource",
    "engine_response_counts",
    "pool_queries",
]

MetricsSourceKind = Literal["scrape", "prometheus"]
POOL_COUNTERS: tuple[str, ...] = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens", "preemptions", "generation_tokens")
POOL_HISTOGRAMS: tuple[str, ...] = tuple(names.HISTOGRAMS)
# Gauges that are fractions: averaged over a server's label sets (engines), not summed (parse_metrics_text).
_MEAN_GAUGES = ("kv_cache_usage",)


class PoolPoint(StrictModel):
    """A pool's metrics at one time: what its servers' series said then (cumulative for counters/histograms)."""

    t_s: float = Field(description="unix time of the read (scrape) or of the query step (Prometheus)")
    gauges: dict[str, float] = Field(default_factory=dict, description="canonical name -> mean per server")
    counters: dict[str, float] = Field(default_factory=dict, description="canonical name -> sum over the servers")
    histograms: dict[str, Histogram] = Field(default_factory=dict, description="canonical name -> sum over the servers")


class PoolWindow(StrictModel):
    """One pool's points over a window ``[start_s, end_s]``, in time order, and where they came from."""

    pool: PoolName
    source: MetricsSourceKind
    start_s: float
    end_s: float
    points: list[PoolPoint] = Field(default_factory=list)

    def counter_delta(self, name: str) -> float | None:
        """The counter's increase from the first to the last point; None without both or after a reset."""
        have = [p.counters[name] for p in self.points if name in p.counters]
        if len(have) < 2 or have[-1] < have[0]:
            return None
        return have[-1] - have[0]

    def histogram_delta(self, name: str) -> Histogram | None:
        """What the histogram observed from the first to the last point holding it (``histogram_delta``)."""
        have = [p.histograms[name] for p in self.points if name in p.histograms]
        return histogram_delta(have[0], have[-1]) if len(have) >= 2 else None

    def histogram_steps(self, name: str) -> list[Histogram]:
        """Per-step deltas (consecutive points), the Kayenta-style samples; a step across a reset is left out."""
        have = [p.histograms[name] for p in self.points if name in p.histograms]
        return [d for a, b in zip(have, have[1:], strict=False) if (d := histogram_delta(a, b)) is not None]


class PoolMetricsSource(Protocol):
    """What the controller reads pools through; ``poll`` at every scrape tick, ``window`` at each window's end."""

    kind: MetricsSourceKind

    async def poll(self, reads: Sequence[PageRead] | None = None) -> None:
        """Take what must be taken now (a scrape; ``reads`` when the tick's pages were read already); a source that
        keeps history itself does nothing."""

    async def window(self, start_s: float, end_s: float) -> dict[PoolName, PoolWindow]:
        """Each pool's points in ``[start_s, end_s]`` (unix times)."""

    async def close(self) -> None: ...


# ---- direct scraping -------------------------------------------------------------------------------------


def _server_point(read: PageRead) -> PoolPoint | None:
    """One server's point from its page; None when the page or its histograms could not be read."""
    if not read.sample.ok or read.histograms is None:
        return None
    sample = read.sample
    return PoolPoint(
        t_s=sample.t_s,
        gauges={g: v for g, v in sample.gauges.items() if g in POOL_GAUGES},
        counters={c: v for c, v in sample.counters.items() if c in POOL_COUNTERS},
        histograms=read.histograms,
    )


def _pool_point(t: float, servers: list[PoolPoint]) -> PoolPoint:
    """Servers' points as the pool's: counters and histograms summed, gauges averaged over the servers."""
    gauges = {g: sum(vals) / len(vals) for g in POOL_GAUGES if (vals := [s.gauges[g] for s in servers if g in s.gauges])}
    counters = {c: sum(s.counters[c] for s in servers) for c in POOL_COUNTERS if all(c in s.counters for s in servers)}
    histograms: dict[str, Histogram] = {}
    for h in POOL_HISTOGRAMS:
        parts = [s.histograms[h] for s in servers if h in s.histograms]
        if len(parts) == len(servers) and (merged := merge_histograms(parts)) is not None:
            histograms[h] = merged
    return PoolPoint(t_s=t, gauges=gauges, counters=counters, histograms=histograms)


class ScrapeSource:
    """Each server's ``/metrics``, read at every ``poll``; the points are kept for ``keep_s`` seconds.

    A pool's point is taken only when every one of its servers answered: a sum missing a server would read
    as a counter reset. Crashes and restarts stay ``pool_watch``'s business.
    """

    kind: MetricsSourceKind = "scrape"

    def __init__(
        self,
        pools: Mapping[PoolName, Sequence[Upstream]],
        timeout_s: float = 5.0,
        keep_s: float = 3600.0,
        *,
        scraper: PoolScraper | None = None,
    ) -> None:
        self.pools = pools
        self.keep_s = keep_s
        self.scraper = scraper if scraper is not None else PoolScraper(pools, timeout_s, histograms=True)
        self.points: dict[PoolName, list[PoolPoint]] = {p: [] for p in pools}
        self.errors: dict[str, str] = {}  # server -> the last read's error

    async def poll(self, reads: Sequence[PageRead] | None = None) -> None:
        """Take this tick's reads (read now unless given: the pool watcher's, from the one shared scraper)."""
        if reads is None:
            reads = await self.scraper.read()
        t = reads[0].sample.t_s if reads else time.time()
        for read in reads:
            url = read.server.metrics_url
            error = read.sample.error if not read.sample.ok else read.histogram_error
            if error is not None:
                self.errors[url] = error
            else:
                self.errors.pop(url, None)
        for pool in self.pools:
            servers = [_server_point(r) for r in reads if r.pool == pool]
            if servers and all(p is not None for p in servers):
                self.points[pool].append(_pool_point(t, [p for p in servers if p is not None]))
            self.points[pool] = [p for p in self.points[pool] if p.t_s >= t - self.keep_s]

    async def window(self, start_s: float, end_s: float) -> dict[PoolName, PoolWindow]:
        return {
            pool: PoolWindow(
                pool=pool, source=self.kind, start_s=start_s, end_s=end_s, points=[p for p in pts if start_s <= p.t_s <= end_s]
            )
            for pool, pts in self.points.items()
        }

    async def close(self) -> None:
        await self.scraper.close()


# ---- Prometheus ------------------------------------------------------------------------------------------


def pool_queries(pool: PoolName, release: Version) -> dict[tuple[str, str], str]:
    """(kind, canonical name) -> the PromQL of its raw pool series, for the names ``release`` exposes. Pure.

    kind is ``gauge``, ``counter``, ``bucket``, ``sum`` or ``count``; histogram names are the canonical
    ``names.HISTOGRAMS`` keys. A metric the release does not expose has no query.
    """
    sel = f'{{{POOL_LABEL}="{pool}"}}'
    out: dict[tuple[str, str], str] = {}
    for g in POOL_GAUGES:
        if (name := names.name_for(names.GAUGES[g], release)) is not None:
            per_server = "avg" if g in _MEAN_GAUGES else "sum"
            out[("gauge", g)] = f"avg({per_server} by (instance) ({name}{sel}))"
    for c in POOL_COUNTERS:
        if (name := names.name_for(names.COUNTERS[c], release)) is not None:
            out[("counter", c)] = f"sum({name}{sel})"
    for h in POOL_HISTOGRAMS:
        if (name := names.name_for(names.HISTOGRAMS[h], release)) is not None:
            out[("bucket", h)] = f"sum by (le) ({name}_bucket{sel})"
            out[("sum", h)] = f"sum({name}_sum{sel})"
            out[("count", h)] = f"sum({name}_count{sel})"
    return out


def _points(results: Mapping[tuple[str, str], list[Series]]) -> list[PoolPoint]:
    """Range-query results as points, one per step time; a histogram only where all its series have a value.

    The step times are Prometheus' own (the window's start in milliseconds, then every step): not filtered
    again here, since the start rounded to the millisecond may lie a fraction before the window's start.
    """
    by_t: dict[float, PoolPoint] = {}
    buckets: dict[tuple[float, str], dict[float, float]] = {}
    parts: dict[tuple[float, str, str], float] = {}

    def point(t: float) -> PoolPoint:
        return by_t.setdefault(t, PoolPoint(t_s=t))

    for (kind, canonical), series in results.items():
        for s in series:
            for t, v in s.points:
                if kind == "gauge":
                    point(t).gauges[canonical] = v
                elif kind == "counter":
                    point(t).counters[canonical] = v
                elif kind == "bucket":
                    buckets.setdefault((t, canonical), {})[float(s.metric["le"])] = v
                else:
                    parts[(t, canonical, kind)] = v
    for (t, canonical), by_le in buckets.items():
        total, count = parts.get((t, canonical, "sum")), parts.get((t, canonical, "count"))
        if total is None or count is None or len(by_le) < 2:
            continue
        bounds = sorted(by_le)
        point(t).histograms[canonical] = Histogram(bounds=bounds, cumulative=[by_le[b] for b in bounds], sum=total, count=count)
    return [by_t[t] for t in sorted(by_t)]


class PrometheusSource:
    """The pools' series as the operator's Prometheus holds them (``specguard_pool`` target label)."""

    kind: MetricsSourceKind = "prometheus"

    def __init__(self, api: PrometheusApi, pools: Sequence[PoolName], release: Version, step_s: float) -> None:
        self.api = api
        self.pools = tuple(pools)
        self.release = release
        self.step_s = step_s

    async def poll(self, reads: Sequence[PageRead] | None = None) -> None:
        """Nothing: Prometheus scrapes on its own schedule."""

    async def window(self, start_s: float, end_s: float) -> dict[PoolName, PoolWindow]:
        out: dict[PoolName, PoolWindow] = {}
        for pool in self.pools:
            queries = pool_queries(pool, self.release)
            answers = await asyncio.gather(*(self.api.range(q, start_s, end_s, self.step_s) for q in queries.values()))
            points = _points(dict(zip(queries, answers, strict=True)))
            out[pool] = PoolWindow(pool=pool, source=self.kind, start_s=start_s, end_s=end_s, points=points)
        return out

    async def close(self) -> None:
        await self.api.close()


async def engine_response_counts(
    api: PrometheusApi, errors_query: str, total_query: str, at: float
) -> dict[PoolName, tuple[float, float]]:
    """(5xx, all) responses per pool as the engine's cumulative counters stood at ``at`` (``EngineResponses``)."""
    found: dict[str, list[float]] = {}
    for i, query in enumerate((errors_query, total_query)):
        for series in await api.instant(query, at):
            pool = series.metric.get(POOL_LABEL)
            if pool is not None and series.points:
                found.setdefault(pool, [0.0, 0.0])[i] += series.points[-1][1]
    pools: tuple[PoolName, ...] = ("baseline", "candidate", "control")
    return {pool: (found[pool][0], found[pool][1]) for pool in pools if pool in found}
