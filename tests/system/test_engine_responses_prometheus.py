"""The engine's 5xx behind a Gateway, from the real Prometheus: ``metrics.engine_responses``' two PromQL
expressions read at a window's two ends give exactly the 5xx and responses the clients received, per pool.

The servers are scripted (fakes: the candidate answers every second request with a 500) and count their
answers by status class as vLLM's API server does (``http_requests_total{status="5xx"}``), standing in for a
Gateway's own counters: the expressions are the operator's, the reading and differencing are specguard's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from specguard.canary.evidence.metrics_source import engine_response_counts
from specguard.canary.evidence.server_side import response_deltas
from specguard.canary.spec.metrics import EngineResponses
from specguard.server_metrics.prometheus_api import PrometheusApi
from tests.prometheus_harness import SCRAPE_INTERVAL_S, PrometheusProcess, pool_jobs

SHORT = {"ttft_ms": 2.0, "interval_ms": 2.0, "chunks": 2}
RESPONSES = EngineResponses(
    errors='sum by (specguard_pool) (http_requests_total{handler="/v1/completions", status="5xx"})',
    total='sum by (specguard_pool) (http_requests_total{handler="/v1/completions"})',
)


async def statuses(url: str, n: int) -> list[int]:
    body = {"model": "scripted", "prompt": "x", "max_tokens": 2, "stream": True}
    out = []
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                await resp.read()
                out.append(resp.status)
    return out


def test_the_engines_5xx_per_pool_through_promql_are_what_the_clients_got(scripted: Any, tmp_path: Path) -> None:
    servers = {"baseline": scripted(**SHORT), "candidate": scripted(**SHORT, fault="http_500", fault_every=2)}
    prometheus = PrometheusProcess(tmp_path / "prometheus", pool_jobs({p: [s.base_url] for p, s in servers.items()}))
    prometheus.__enter__()
    try:

        async def main() -> None:
            async with PrometheusApi(prometheus.url) as api:
                # one request each first, so that both counters exist, and Prometheus has scraped them
                for s in servers.values():
                    await statuses(s.base_url, 1)
                deadline = time.monotonic() + 30
                while len(await api.instant(RESPONSES.total)) < 2:
                    assert time.monotonic() < deadline, "Prometheus never scraped both pools"
                    await asyncio.sleep(0.2)
                await asyncio.sleep(2 * SCRAPE_INTERVAL_S)
                start = time.time()
                await asyncio.sleep(0.1)
                seen = {"baseline": await statuses(servers["baseline"].base_url, 10)}
                seen["candidate"] = await statuses(servers["candidate"].base_url, 20)
                await asyncio.sleep(2.5 * SCRAPE_INTERVAL_S)  # two scrapes after the last answer
                end = time.time()
                before = await engine_response_counts(api, RESPONSES.errors, RESPONSES.total, start)
                after = await engine_response_counts(api, RESPONSES.errors, RESPONSES.total, end)
                deltas = response_deltas(before, after)
                for pool, got in seen.items():
                    assert deltas[pool] == (sum(1 for c in got if c >= 500), len(got)), (pool, got, deltas)
                assert deltas["candidate"][0] > 0 and deltas["baseline"][0] == 0

        asyncio.run(main())
    finally:
        prometheus.stop()
