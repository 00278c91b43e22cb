"""``specguard canary observability``'s files loaded by the real Prometheus (Debian's 2.42), which scrapes the
session's real vLLM CPU servers (baseline, and the n-gram server as the candidate) and the canary's own proxy
(its admin listener, behind the bearer token), all every second.

A canary run holds the candidate at 50 % while a known workload goes through its proxy; the window has quiet
on both sides (more than two scrape intervals). Then: every recording and alerting rule evaluates without
error (``/api/v1/rules``: health ``ok``); the n-gram acceptance read through the recording rule equals
accepted / draft tokens from the counter deltas read directly from the server (a ratio of two ``rate``s over
one window: their extrapolation cancels, as both series are scraped together); the mean acceptance length
rule equals 1 + accepted / drafts; the proxy's request counter moved by the workload; and every dashboard
query evaluates without error, with data wherever the workload produces any (no proxy errors: no error ratio).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specguard.canary.evidence.metrics_source import ScrapeSource
from specguard.canary.observability import observability_files
from specguard.canary.observability.conventions import POOL_LABEL, PROXY_JOB
from specguard.canary.observability.dashboard import dashboard_queries
from specguard.canary.observability.recording import (
    ACCEPTANCE_RATE,
    MEAN_ACCEPTANCE_LENGTH,
    PROXY_ERROR_RATIO,
    plan_recording,
)
from specguard.canary.observability.write import ALERTING_FILE, RECORDING_FILE
from specguard.canary.proxy.upstream import Upstream
from specguard.server_metrics.prometheus_api import PrometheusApi
from specguard.vllm.knowledge import parse_version
from tests.canary_harness import TOKEN, TOKEN_ENV, CanaryRun, running, write_rollout
from tests.prometheus_harness import SCRAPE_INTERVAL_S, PrometheusProcess, pool_jobs, send_streams, wait_scraped

pytestmark = pytest.mark.vllm

N = 24  # streams through the proxy
TOKENS = 24
QUIET_S = 3 * SCRAPE_INTERVAL_S


async def rules_health(url: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/api/v1/rules") as resp:
        body = await resp.json()
    return [r for g in body["data"]["groups"] for r in g["rules"]]


async def test_the_generated_rules_and_dashboard_evaluate_on_real_servers(
    vllm_servers: dict[str, Any], runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    servers = {"baseline": vllm_servers["baseline"], "candidate": vllm_servers["ngram"]}
    release = parse_version(runtime.vllm_version)
    path = write_rollout(
        tmp_path,
        {p: [s.base_url] for p, s in servers.items()},
        # Held at 50 % for the whole test: the canary serves both pools and moves no weight.
        steps=[{"percent": 50, "min_time_s": 3600}, {"percent": 100}],
    )
    run = CanaryRun(path, tmp_path / "logs", exit_when_finished=False)
    files = observability_files(run.rollout, release)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    proxy_job = {
        "job_name": PROXY_JOB,
        "static_configs": [{"targets": [run.rollout.admin.listen]}],
        "authorization": {"credentials": TOKEN},
    }
    jobs = pool_jobs({p: [s.base_url] for p, s in servers.items()}, extra=[proxy_job])
    prom = PrometheusProcess(tmp_path / "prometheus", jobs, [tmp_path / RECORDING_FILE, tmp_path / ALERTING_FILE])
    prom.start()
    try:
        await asyncio.to_thread(prom.wait_ready)
        async with running(run), PrometheusApi(prom.url) as api:
            await check(api, prom.url, run, servers, release)
    finally:
        prom.stop()


async def check(api: PrometheusApi, url: str, run: CanaryRun, servers: dict[str, Any], release: Any) -> None:
    direct = ScrapeSource({"candidate": [Upstream(servers["candidate"].base_url, servers["candidate"].metrics_url)]})
    await wait_scraped(api, 3)
    await asyncio.sleep(QUIET_S)
    await direct.poll()
    t0 = direct.points["candidate"][-1].t_s
    assert await send_streams(run.url, N, max_tokens=TOKENS, users=True) == N
    await asyncio.sleep(QUIET_S)
    await direct.poll()
    t1 = direct.points["candidate"][-1].t_s
    await direct.close()
    # Two rule evaluations after the window's end, so the recorded series cover it.
    await asyncio.sleep(2 * SCRAPE_INTERVAL_S)
    at = time.time()
    plan = plan_recording(run.rollout, release)
    assert at - plan.windows.rate_s < t0 - SCRAPE_INTERVAL_S, "the rules' rate window covers the whole load"

    window = (await direct.window(t0, t1))["candidate"]
    accepted, draft_tokens = window.counter_delta("spec_accepted_tokens"), window.counter_delta("spec_draft_tokens")
    drafts = window.counter_delta("spec_drafts")
    assert accepted and draft_tokens and drafts, "the candidate drafted and accepted during the load"

    rate = await api.instant(f'{ACCEPTANCE_RATE}{{{POOL_LABEL}="candidate"}}', at=at)
    assert len(rate) == 1 and rate[0].points[0][1] == pytest.approx(accepted / draft_tokens, rel=1e-9)
    length = await api.instant(f'{MEAN_ACCEPTANCE_LENGTH}{{{POOL_LABEL}="candidate"}}', at=at)
    assert len(length) == 1 and length[0].points[0][1] == pytest.approx(1 + accepted / drafts, rel=1e-9)
    print(f"acceptance {accepted:g}/{draft_tokens:g} = {accepted / draft_tokens:.6f}; rule {rate[0].points[0][1]:.6f}")

    # The proxy's own series are there too, and counted the workload.
    sent = await api.instant(
        f"sum(specguard_canary_requests_total @ {t1!r}) - (sum(specguard_canary_requests_total @ {t0!r}) or vector(0))", at=at
    )
    assert sent and sent[0].points[0][1] == N

    rules = await rules_health(url)
    assert rules and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    empty = []
    for query in dashboard_queries(plan):
        result = await api.instant(query, at=at)  # a PromQLError fails the test with Prometheus' words
        if not result:
            empty.append(query)
    # No request failed at the proxy, so its error counter has no series and the error ratio none either.
    assert all(PROXY_ERROR_RATIO in q for q in empty), empty
    print(f"{len(rules)} rules ok; {len(dashboard_queries(plan))} dashboard queries, empty: {empty}")
