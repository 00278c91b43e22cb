"""One reader of the pools' pages: behind an engine with ``metrics: scrape``, the pool watcher and the scrape
source are fed by one ``PoolScraper``, so each server's ``/metrics`` is fetched once per tick (it was twice)."""

from __future__ import annotations

import asyncio
from collections import Counter

from aiohttp import web

from specguard.canary.evidence.metrics_source import ScrapeSource
from specguard.canary.evidence.pool_watch import PoolWatcher
from specguard.canary.evidence.scrape import PoolScraper
from specguard.canary.evidence.server_side import ServerSideEvidence
from specguard.canary.judge.policy import analysis_policy
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.rollout import Rollout
from specguard.canary.spec.vocabulary import PoolName
from tests.unit.canary.proxy_fakes import serving

PAGE = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 10.0
"""
POOLS = {"baseline": {"servers": ["http://a:1"]}, "candidate": {"servers": ["http://b:1"]}}
ROLLOUT = Rollout.model_validate({"name": "r", "pools": POOLS, "admin": {"token_env": "T"}})


def test_each_page_is_read_once_per_tick_for_the_watcher_and_the_source() -> None:
    gets: Counter[str] = Counter()

    async def metrics(request: web.Request) -> web.Response:
        gets[request.host] += 1
        return web.Response(text=PAGE, content_type="text/plain")

    async def go() -> tuple[ScrapeSource, PoolWatcher]:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        async with serving(app) as one, serving(app) as two:
            pools: dict[PoolName, list[Upstream]] = {
                "baseline": [Upstream(one, one + "/metrics")],
                "candidate": [Upstream(two, two + "/metrics")],
            }
            scraper = PoolScraper(pools, histograms=True)
            watcher = PoolWatcher(pools, scraper=scraper)
            source = ScrapeSource(pools, scraper=scraper)
            evidence = ServerSideEvidence(source, analysis_policy(ROLLOUT), [], watcher)
            for _ in range(3):
                assert await evidence.read() == []
            await evidence.close()
            return source, watcher

    source, watcher = asyncio.run(go())
    assert sorted(gets.values()) == [3, 3], "one GET per server per tick"
    assert [len(source.points[p]) for p in ("baseline", "candidate")] == [3, 3]
    assert source.points["candidate"][-1].gauges == {"requests_waiting": 2.0}
    assert [len(r) for pool in watcher.window.values() for r in pool.by_server.values()] == [3, 3]
