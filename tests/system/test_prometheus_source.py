"""PrometheusSource against ScrapeSource: the real Prometheus (Debian's 2.42) scraping the session's real vLLM CPU
servers every second, as pools ``baseline`` and ``candidate`` (the n-gram server), read through PromQL and directly.

A known workload goes to each server directly (N streams of exactly T tokens); the window is taken with quiet
on both sides (more than two scrape intervals), so that Prometheus' latest sample at each edge is the state
the direct read saw. Then both sources must give the same cumulative points at the edges, so the same counter
and histogram deltas, and those deltas must be the workload (N x T output tokens, N requests per histogram).
PromQL's ``histogram_quantile`` of the raw difference of the bucket series (``@`` the window's edges) must
equal specguard's ``histogram_quantile`` of the delta: that is the comparison the judge relies on. The
``increase()`` form is not held to equality: it extrapolates each bucket series to the range's edges; a
uniform factor leaves a quantile unchanged (in the run measured here every quantile came out equal), but a
bucket near 0 at the start is extrapolated less (Prometheus' zero rule) and then the quantile moves. The test
checks only that our quantile of PromQL's own ``increase`` vector is PromQL's, and prints both figures.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specguard.canary.evidence.metrics_source import POOL_HISTOGRAMS, PoolWindow, PrometheusSource, ScrapeSource
from specguard.canary.observability.conventions import POOL_LABEL
from specguard.canary.proxy.upstream import Upstream
from specguard.server_metrics import names
from specguard.server_metrics.histograms import Histogram, histogram_quantile
from specguard.server_metrics.prometheus_api import PrometheusApi, PromQLError
from specguard.vllm.knowledge import Version, parse_version
from tests.prometheus_harness import SCRAPE_INTERVAL_S, PrometheusProcess, pool_jobs, send_streams, wait_scraped

pytestmark = pytest.mark.vllm

N = 12  # streams per server
TOKENS = 24  # tokens per stream
QUIET_S = 3 * SCRAPE_INTERVAL_S  # more than two scrape intervals between the load and each edge's read
POOLS = ("baseline", "candidate")


@dataclass
class Observed:
    release: Version
    prom_url: str
    t0: float
    t1: float
    scraped: dict[str, PoolWindow]
    queried: dict[str, PoolWindow]


async def observe(prom_url: str, servers: dict[str, Any], release: Version) -> Observed:
    upstreams = {pool: [Upstream(s.base_url, s.metrics_url)] for pool, s in servers.items()}
    scrape = ScrapeSource(upstreams)  # type: ignore[arg-type]  # the pools are POOLS
    async with PrometheusApi(prom_url) as api:
        await wait_scraped(api, len(servers))
        source = PrometheusSource(api, POOLS, release, step_s=SCRAPE_INTERVAL_S)
        await asyncio.sleep(QUIET_S)
        await scrape.poll()
        t0 = scrape.points["baseline"][-1].t_s
        done = await asyncio.gather(*(send_streams(s.base_url, N, max_tokens=TOKENS) for s in servers.values()))
        assert done == [N] * len(servers)
        await asyncio.sleep(QUIET_S)
        await scrape.poll()
        t1 = scrape.points["baseline"][-1].t_s
        scraped = await scrape.window(t0, t1)
        queried = await source.window(t0, t1)
    await scrape.close()
    return Observed(release, prom_url, t0, t1, scraped, queried)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def observed(vllm_servers: dict[str, Any], runtime: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    servers = {"baseline": vllm_servers["baseline"], "candidate": vllm_servers["ngram"]}
    prom = PrometheusProcess(tmp_path_factory.mktemp("prometheus"), pool_jobs({p: [s.base_url] for p, s in servers.items()}))
    with prom:
        yield asyncio.run(observe(prom.url, servers, parse_version(runtime.vllm_version)))


def edges(w: PoolWindow) -> tuple[Any, Any]:
    assert len(w.points) >= 2, w.points
    return w.points[0], w.points[-1]


@pytest.mark.parametrize("pool", POOLS)
def test_both_sources_read_the_same_points_at_the_window_edges(observed: Observed, pool: str) -> None:
    scraped, queried = observed.scraped[pool], observed.queried[pool]
    assert (scraped.source, queried.source) == ("scrape", "prometheus")
    # One point per scrape interval from Prometheus; the direct source read twice.
    assert len(queried.points) == math.floor((observed.t1 - observed.t0) / SCRAPE_INTERVAL_S) + 1
    for s, q in zip(edges(scraped), edges(queried), strict=True):
        assert q.t_s - s.t_s < SCRAPE_INTERVAL_S
        assert q.counters == s.counters
        assert q.gauges == pytest.approx(s.gauges, rel=1e-12, abs=0)
        assert set(q.histograms) == set(s.histograms) == set(POOL_HISTOGRAMS)
        for h in POOL_HISTOGRAMS:
            a, b = s.histograms[h], q.histograms[h]
            assert (b.bounds, b.cumulative, b.count) == (a.bounds, a.cumulative, a.count), h
            assert b.sum == pytest.approx(a.sum, rel=1e-12), h


@pytest.mark.parametrize("pool", POOLS)
def test_the_deltas_are_the_known_workload_through_either_source(observed: Observed, pool: str) -> None:
    for w in (observed.scraped[pool], observed.queried[pool]):
        assert w.counter_delta("generation_tokens") == N * TOKENS, w.source
        for h in ("e2e", "ttft", "tpot"):
            delta = w.histogram_delta(h)
            assert delta is not None and delta.count == N and delta.cumulative[-1] == N, (w.source, h)
        itl = w.histogram_delta("itl")
        # One ITL observation per engine step after the first token: T-1 per stream without drafts, fewer with.
        assert itl is not None and 0 < itl.count <= N * (TOKENS - 1)
        if pool == "baseline":
            assert itl.count == N * (TOKENS - 1) and "spec_draft_tokens" not in w.points[-1].counters
    # Per-step deltas add up to the window's delta.
    q = observed.queried[pool]
    steps = q.histogram_steps("e2e")
    assert sum(s.count for s in steps) == N and len(steps) == len(q.points) - 1


def test_the_candidate_drafts_and_accepts_through_either_source(observed: Observed) -> None:
    s, q = observed.scraped["candidate"], observed.queried["candidate"]
    for c in ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens"):
        assert s.counter_delta(c) == q.counter_delta(c), c
    assert (q.counter_delta("spec_draft_tokens") or 0) > 0 and (q.counter_delta("spec_accepted_tokens") or 0) > 0


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("q", [0.5, 0.99])
async def test_promql_histogram_quantile_of_the_raw_difference_is_ours(observed: Observed, pool: str, q: float) -> None:
    sel = f'{{{POOL_LABEL}="{pool}"}}'
    async with PrometheusApi(observed.prom_url) as api:
        for h in POOL_HISTOGRAMS:
            name = names.name_for(names.HISTOGRAMS[h], observed.release)
            ours = histogram_quantile(observed.scraped[pool].histogram_delta(h), q)  # type: ignore[arg-type]
            raw = f"sum by (le) ({name}_bucket{sel} @ {observed.t1!r}) - sum by (le) ({name}_bucket{sel} @ {observed.t0!r})"
            theirs = await api.instant(f"histogram_quantile({q}, {raw})", at=observed.t1)
            assert ours is not None and len(theirs) == 1
            assert theirs[0].points[0][1] == pytest.approx(ours, rel=1e-9), h

            # increase() extrapolates; our quantile of PromQL's own increase vector is PromQL's quantile of it. Its
            # range reaches 5 s before t0, into the quiet: a range of exactly t1 - t0 (4 s once the servers got
            # faster) could miss the load's samples, and an empty increase has no quantile to compare.
            window = f"{math.ceil(observed.t1 - observed.t0) + 5}s"
            inc = await api.instant(f"sum by (le) (increase({name}_bucket{sel}[{window}]))", at=observed.t1)
            by_le = {float(s.metric["le"]): s.points[0][1] for s in inc}
            bounds = sorted(by_le)
            hist = Histogram(bounds=bounds, cumulative=[by_le[b] for b in bounds], sum=0.0, count=by_le[bounds[-1]])
            via_increase = await api.instant(
                f"histogram_quantile({q}, sum by (le) (increase({name}_bucket{sel}[{window}])))", at=observed.t1
            )
            assert via_increase[0].points[0][1] == pytest.approx(histogram_quantile(hist, q), rel=1e-9), h
            print(f"{pool} {h} q={q}: raw difference {ours:.6g} s, increase() {via_increase[0].points[0][1]:.6g} s")


async def test_a_bad_query_is_a_promql_error_in_prometheus_words(observed: Observed) -> None:
    async with PrometheusApi(observed.prom_url) as api:
        with pytest.raises(PromQLError) as err:
            await api.instant("sum by (le) (")
    assert err.value.error_type == "bad_data" and "parse error" in err.value.error


async def test_a_prometheus_that_is_not_there_is_unreachable(tmp_path: Path) -> None:
    from specguard.server_metrics.prometheus_api import PrometheusUnreachable
    from specguard.vllm.process import free_port

    async with PrometheusApi(f"http://127.0.0.1:{free_port()}", token="secret-token-never-shown", timeout_s=5) as api:
        with pytest.raises(PrometheusUnreachable) as err:
            await api.range("up", 0.0, 10.0, 1.0)
        assert "secret-token-never-shown" not in str(err.value) + repr(api)
