"""The canary's proxy in front of real vLLM CPU servers: the session's baseline and n-gram servers as pools.

The proxy alone (``CanaryProxy``), its weights set by the test, so that a test controls exactly which
weight each request meets; the controller's own tests run against the scripted servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import statistics
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from specguard.analysis.client_stalls import itl_outside_stalls, stalled_chunks
from specguard.analysis.request_metrics import per_token_itl
from specguard.canary.proxy.server import CanaryProxy
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.rollout import Split
from specguard.canary.state.records import ProxiedRequest
from specguard.embedded.servers import SERVED_NAME
from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig, run_bench
from specguard.results.models import LoadShape, RequestRecord, SamplingOverrides
from specguard.results.run_dir import load_run
from specguard.vllm.process import free_port
from tests.sse_parts import difference as sse_difference
from tests.sse_parts import parts as sse_parts

pytestmark = pytest.mark.vllm


@contextlib.asynccontextmanager
async def proxy_for(vllm_servers: dict[str, Any], **split: Any) -> AsyncIterator[tuple[CanaryProxy, str, list[ProxiedRequest]]]:
    pools = {
        "baseline": [Upstream(vllm_servers["baseline"].base_url, vllm_servers["baseline"].metrics_url)],
        "candidate": [Upstream(vllm_servers["ngram"].base_url, vllm_servers["ngram"].metrics_url)],
    }
    records: list[ProxiedRequest] = []
    proxy = CanaryProxy(pools, Split.model_validate(split), on_record=records.append, seed=7)
    runner = web.AppRunner(proxy.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield proxy, f"http://127.0.0.1:{port}", records
    finally:
        await runner.cleanup()
        await proxy.close()


def masked(body: bytes) -> bytes:
    """A stream with its ``created`` seconds masked: the one field that differs between two identical requests."""
    return re.sub(rb'"created":\d+', b'"created":0', body)


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any], rid: str) -> bytes:
    async with session.post(url, json=body, headers={"X-Request-Id": rid}) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.read()


@pytest.mark.parametrize(
    ("api", "stream_options"),
    [("completions", None), ("chat", None), ("completions", {"include_usage": True}), ("chat", {"include_usage": True})],
)
async def test_streams_through_the_proxy_are_byte_identical_to_direct_ones(
    vllm_servers, api, stream_options, record_property
) -> None:
    """A proxied stream against a direct one of the same request, told apart by part (``tests/sse_parts.py``).

    Two greedy streams of one request can differ by generation alone: vLLM puts several tokens in one delta
    when its output loop falls behind the engine (a loaded machine; issue 28's 3,218 bytes direct against
    2,971 proxied is a stream shorter by about one event, 228 bytes here: the same text in one event fewer),
    and a near-tie of the logits can pick another token under another batch or prefix-cache state. Stalling
    the vLLM API server for 0.5 s mid-stream (SIGSTOP), without any proxy, reproduced the first every time
    (24 text events became 2 to 9); 64 streams of this request (20 proxied, 44 direct) on both servers, idle
    and beside 3 concurrent requests, were all byte-identical. So the test checks what is the proxy's:
    the SSE framing and every event's JSON apart from its text must be the direct stream's (a difference
    there fails at once, named), every token-bearing event the proxy read upstream reaches the client (its
    own record counts them), and a pair whose generation is the same must be identical byte for byte. A pair
    whose generation differs is sent again, up to three times, and what differed is printed and recorded.
    """
    path = "/v1/completions" if api == "completions" else "/v1/chat/completions"
    prompt = "the cat sat on the mat and the cat sat on the"
    body: dict[str, Any] = {"model": SERVED_NAME, "max_tokens": 24, "temperature": 0.0, "stream": True}
    body |= {"prompt": prompt} if api == "completions" else {"messages": [{"role": "user", "content": prompt}]}
    if stream_options is not None:
        body["stream_options"] = stream_options
    async with proxy_for(vllm_servers, sticky={"source": "none"}) as (proxy, url, records), aiohttp.ClientSession() as s:
        for weight, server in ((0.0, "baseline"), (1.0, "ngram")):
            proxy.set_weights(weight, 0.0, 0)
            rid = f"bytes-{api}-{bool(stream_options)}-{server}"
            # Warm the prefix cache first: a cached prompt is computed along another path, and on this tiny
            # model a near-tie of the logits can then pick another token (seen once in chat, 1 run of 3).
            await post(s, vllm_servers[server].base_url + path, body, rid)
            generation_differed: list[str] = []
            for _ in range(3):
                through = await post(s, url + path, body, rid)
                direct = await post(s, vllm_servers[server].base_url + path, body, rid)
                proxy.flush()
                record = records[-1]
                assert record.server == vllm_servers[server].base_url and record.ok
                assert record.token_source == "server_usage" and record.output_tokens == 24
                events = [t for t in sse_parts(through).texts if t]
                assert len(events) == len(record.chunk_tokens), (
                    f"{server}: {len(events)} text events reached the client, the proxy read {len(record.chunk_tokens)}"
                )
                found = sse_difference(masked(direct), masked(through))
                if found is None:
                    break
                part, what = found
                assert part == "generation", f"{server}: the proxy changed the stream: {what}"
                generation_differed.append(what)
                print(f"{server}: the generation differed, not the proxy: {what}")
            if generation_differed:
                record_property(f"{server}_generation_differed", generation_differed)
            if stream_options is None:
                assert b'"usage"' not in through, "the usage the proxy asked for is not forwarded"
    if server == "ngram":
        assert max(record.chunk_tokens) >= 1


async def test_the_split_follows_the_weight_and_sticky_keys_never_move_back(vllm_servers) -> None:
    body = {"model": SERVED_NAME, "prompt": "hello", "max_tokens": 1, "temperature": 0.0, "stream": True}
    async with proxy_for(vllm_servers, sticky={"source": "user"}) as (proxy, url, records), aiohttp.ClientSession() as s:
        # 400 requests without a key at weight 0.3: split per request.
        proxy.set_weights(0.3, 0.0, 0)
        sem = asyncio.Semaphore(8)

        async def one(rid: str, user: str | None) -> None:
            async with sem:
                await post(s, f"{url}/v1/completions", body | ({"user": user} if user else {}), rid)

        await asyncio.gather(*(one(f"split-{i}", None) for i in range(400)))
        proxy.flush()  # records are measured off the handlers' path, a loop turn or so after each response
        n = 400
        cand = sum(r.pool == "candidate" for r in records if r.request_id.startswith("split-"))
        sigma = math.sqrt(n * 0.3 * 0.7)
        assert abs(cand - n * 0.3) <= 4.5 * sigma, f"{cand} of {n} to the candidate at weight 0.3"
        # 100 keys while the weight rises: a key on the candidate stays there.
        pool_of: dict[str, list[str]] = {}
        for step, weight in enumerate((0.05, 0.25, 0.5, 1.0)):
            proxy.set_weights(weight, 0.0, step)
            tag = f"w{step}-"
            await asyncio.gather(*(one(f"{tag}{k}", f"user-{k}") for k in range(100)))
            proxy.flush()
            for r in records:
                if r.request_id.startswith(tag):
                    pool_of.setdefault(r.request_id.removeprefix(tag), []).append(r.pool)
    for key, pools in pool_of.items():
        first = pools.index("candidate") if "candidate" in pools else len(pools)
        assert all(p == "candidate" for p in pools[first:]), f"key {key} went back: {pools}"
    assert all(pools[-1] == "candidate" for pools in pool_of.values()), "at weight 1 every key is on the candidate"
    assert sum(pools[0] == "candidate" for pools in pool_of.values()) < 20, "at weight 0.05 few keys are"


def _bench(url: str, out: Path, metrics_url: str | None, requests: int = 12, seed: int = 3) -> BenchConfig:
    cfg = BenchConfig(
        base_url=url,
        model=SERVED_NAME,
        prompts=synthetic_prompts("open-ended", count=12),
        load=LoadShape(kind="concurrency", concurrency=1, num_requests=requests, warmup_requests=1, seed=seed),
        sampling=SamplingOverrides(temperature=0.0, max_tokens=32),
        metrics_url=metrics_url,
        out_dir=out,
        scrape_interval_s=1.0,
    )
    return cfg


async def test_the_canarys_itl_and_ttft_agree_with_bench_direct(vllm_servers, tmp_path: Path, record_property) -> None:
    """The same requests, one at a time, measured three ways: bench direct to the baseline server, bench
    through the proxy, and the proxy's own records of the latter.

    The proxy's records and the bench behind it see the same streams one hop apart: the client never sees a
    token before the proxy does, and the median TTFT difference and the per-token ITL medians agree within
    3 ms (the hop on loopback is well under 1 ms when idle; single requests took up to 6 ms longer while the
    2 cores were busy with other work, hence medians). Against bench direct the medians agree within 20 % or
    3 ms, whichever is larger: the noise of the CPU server.

    The machine's noise is matched rather than hoped away. Direct and proxied runs of 4 requests alternate, so
    both meet the same phases of the host: on the 2-core CI machine a request's per-token ITL went from 5 to
    26 ms and back within a second. And what a client stall touched is left out of the comparison with bench
    direct: the test's process (bench, and the proxy too) went unscheduled for up to 250 ms at a time while
    vLLM generated, and the chunks read as it resumed carry the stall or near-zero gaps
    (``analysis/client_stalls.py``): ITL over the gaps no stall touched, TTFT over the requests no stall
    touched before their first chunk was read. Rounds go on, at most 12, until each side has 150 such ITL values and 8 TTFTs.
    """
    server = vllm_servers["baseline"]
    direct: list[_Measured] = []
    proxied: list[_Measured] = []
    async with proxy_for(vllm_servers, sticky={"source": "none"}) as (proxy, url, records):
        proxy.set_weights(0.0, 0.0, 0)
        for n in range(MAX_ROUNDS):
            direct += await _measured(_bench(server.base_url, tmp_path / f"direct-{n}", None, 4, n))
            proxied += await _measured(_bench(url, tmp_path / f"proxied-{n}", None, 4, n))
            if min(_enough(direct), _enough(proxied)):
                break
    by_id = {r.request_id: r for r in records}
    pairs = [(m, by_id[m.record.request_id]) for m in proxied if m.record.request_id in by_id]
    assert len(pairs) == len(proxied), "bench's request ids reach the proxy's records"
    for m, canary in pairs:
        assert canary.pool == "baseline" and canary.output_tokens == m.record.output_tokens
        assert len(canary.chunk_times_s) == len(m.record.chunk_times_s), "the same stream, chunk for chunk"
        assert m.record.ttft_s >= canary.ttft_s - 0.0005, "the client cannot see a token before the proxy does"
    # The hop (the proxy reading the request, choosing, connecting upstream) is in the client's TTFT only.
    assert statistics.median(m.record.ttft_s - p.ttft_s for m, p in pairs) < 0.003
    # The proxy and the client behind it, all chunks: a stall of the one process delays both alike.
    assert abs(_itl_ms([m.record for m, _ in pairs]) - _itl_ms([p for _, p in pairs])) < 3.0

    direct_itl = [v for m in direct for v in m.itl_s(m.record)]
    canary_itl = [v for m, p in pairs for v in m.itl_s(p)]
    direct_ttft = [m.record.ttft_s for m in direct if m.ttft_ok]
    canary_ttft = [p.ttft_s for m, p in pairs if m.ttft_ok]
    seen = (
        f"{len(direct_itl)} and {len(canary_itl)} ITL values, {len(direct_ttft)} and {len(canary_ttft)} TTFTs "
        f"outside client stalls, direct and proxied, in {n + 1} rounds"
    )
    assert min(len(direct_itl), len(canary_itl)) >= MIN_ITL_VALUES and min(len(direct_ttft), len(canary_ttft)) >= MIN_TTFTS, seen
    for name, d_values, c_values in (("itl", direct_itl, canary_itl), ("ttft", direct_ttft, canary_ttft)):
        d, c = statistics.median(d_values) * 1000, statistics.median(c_values) * 1000
        record_property(f"{name}_ms_direct_vs_canary", f"{d:.2f} vs {c:.2f} ({seen})")
        assert abs(c - d) <= max(0.20 * d, 3.0), f"{name}: canary {c:.2f} ms vs bench direct {d:.2f} ms ({seen})"


MIN_ITL_VALUES = 150
MIN_TTFTS = 24
MAX_ROUNDS = 12


@dataclass(frozen=True)
class _Measured:
    """A bench record and which of its chunks the client read during one of its stalls."""

    record: RequestRecord
    stalled: list[bool]
    ttft_ok: bool  # no stall between the send and the first chunk's read

    def itl_s(self, stream: RequestRecord | ProxiedRequest) -> list[float]:
        """Per-token ITL of this stream (the client's record or the proxy's of the same stream), stalls left out."""
        return itl_outside_stalls(stream.chunk_times_s, stream.chunk_tokens, self.stalled)


def _enough(measured: list[_Measured]) -> bool:
    itl = sum(len(m.itl_s(m.record)) for m in measured)
    return itl >= MIN_ITL_VALUES and sum(m.ttft_ok for m in measured) >= MIN_TTFTS


def _itl_ms(recs: Sequence[RequestRecord | ProxiedRequest]) -> float:
    return statistics.median(v * 1000 for r in recs for v in per_token_itl(r.chunk_times_s, r.chunk_tokens))


async def _measured(cfg: BenchConfig) -> list[_Measured]:
    """One bench run: each record with the chunks its client read during a stall."""
    summary = await run_bench(cfg)
    assert summary.errors == 0 and summary.client_stalls is not None
    _, recs, _ = load_run(cfg.out_dir)
    stalls = summary.client_stalls.intervals_s
    return [_Measured(r, stalled_chunks(r, stalls), _first_chunk_clear(r, stalls)) for r in recs]


def _first_chunk_clear(r: RequestRecord, stalls: Sequence[tuple[float, float]]) -> bool:
    first = r.sent_s + (r.ttft_s or 0.0)
    return r.ttft_s is not None and not any(a <= first + 0.002 and b >= r.sent_s for a, b in stalls)
