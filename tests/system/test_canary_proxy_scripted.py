"""The canary proxy against the scripted (fake vLLM) server, a child process: streams read as bench reads them,
usage asked for and stripped, and its faults (refused, HTTP 500, a hang, a broken stream, no ``[DONE]``, an error
event, a 4xx).

The system tier (the scripted server runs as a process); the proxy against in-test fakes is in
tests/unit/canary/test_proxy.py, whose helpers these tests share.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from specguard.canary.proxy.upstream import Upstream
from specguard.canary.state.records import ProxiedRequest
from tests.unit.canary.proxy_fakes import completion, fake, free_url, proxied
from tests.unit.canary.test_proxy import make, post

FAST = {"ttft_ms": 5, "interval_ms": 5, "chunks": 4}


def scripted_up(server: object) -> Upstream:
    return Upstream(server.base_url, server.metrics_url)  # type: ignore[attr-defined]


async def logs_of(server: object, n: int) -> dict[str, object]:
    """The scripted server's chunk log once it holds ``n`` requests: it writes a line after the response's end,
    so a client can finish first. A guard of 10 s against waiting forever, not a measurement."""
    for _ in range(1000):
        logs: dict[str, object] = server.chunk_logs()  # type: ignore[attr-defined]
        if len(logs) >= n:
            return logs
        await asyncio.sleep(0.01)
    return logs


async def test_streams_read_by_read_and_measures_as_bench_does(scripted) -> None:
    server = scripted(ttft_ms=20, interval_ms=80, chunks=5)
    records: list[ProxiedRequest] = []
    proxy = make({"baseline": [scripted_up(server)]}, records)
    body = completion(max_tokens=5, stream_options={"include_usage": True, "continuous_usage_stats": True})
    async with proxied(proxy) as url, aiohttp.ClientSession() as session:
        async with session.post(f"{url}/v1/completions", json=body, headers={"X-Request-Id": "s1"}) as resp:
            first = await resp.content.readany()
            first_seen = time.monotonic()
            rest = await resp.read()
    sent = (await logs_of(server, 1))["s1"].chunk_sent  # type: ignore[attr-defined]
    assert first.startswith(b"data: {") and first_seen < sent[-1], "the first chunk reached the client before the last was sent"
    assert (first + rest).endswith(b"data: [DONE]\n\n") and (first + rest).count(b'"usage"') == 6, "asked for usage: kept"
    (rec,) = records
    assert rec.ok and rec.pool == "baseline" and rec.attempt == 1 and not rec.retried and rec.http_status == 200
    assert rec.chunk_tokens == [1] * 5 and rec.output_tokens == 5 and rec.token_source == "server_usage"
    assert rec.ttft_s == rec.chunk_times_s[0] and rec.e2e_s == rec.chunk_times_s[-1]
    assert rec.chunk_times_s == sorted(rec.chunk_times_s) and rec.in_flight == 0


async def test_usage_is_asked_for_and_stripped_from_what_the_client_gets(scripted) -> None:
    records: list[ProxiedRequest] = []
    async with fake("baseline") as base:
        proxy = make({"baseline": [base.upstream()]}, records)
        async with proxied(proxy) as url, aiohttp.ClientSession() as session:
            status, data = await post(session, url, completion())
    assert status == 200
    upstream_body = json.loads(base.seen[0].body)
    assert upstream_body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert b"usage" not in data and data.count(b"data: ") == 3 and data.endswith(b"data: [DONE]\n\n")
    assert records[0].chunk_tokens == [1, 1] and records[0].output_tokens == 2


@pytest.mark.parametrize("fault", ["refused", "http_500", "hang"])
async def test_a_failure_before_the_first_byte_is_retried_on_the_baseline(scripted, fault: str) -> None:
    base = scripted(**FAST)
    if fault == "refused":
        cand = free_url()
    else:  # hang with 0 chunks: no status line at all, so the first-byte timeout strikes
        cand = scripted_up(scripted(fault=fault, fault_after_chunks=0, **FAST))
    records: list[ProxiedRequest] = []
    proxy = make({"baseline": [scripted_up(base)], "candidate": [cand]}, records, first_byte_timeout_s=0.5)
    proxy.set_weights(1.0, 0.0, 3)
    async with proxied(proxy) as url, aiohttp.ClientSession() as session:
        status, data = await post(session, url, completion(), rid="x1")
    assert status == 200 and data.endswith(b"data: [DONE]\n\n") and b"usage" not in data
    first, second = records
    assert (first.pool, first.attempt, first.retried, first.ok) == ("candidate", 1, True, False)
    assert first.error is not None and (first.http_status == 500) == (fault == "http_500")
    assert (second.pool, second.attempt, second.retried, second.ok, second.step) == ("baseline", 2, False, True, 3)
    assert first.request_id == second.request_id == "x1" and list(await logs_of(base, 1)) == ["x1"]


async def test_a_stream_broken_after_the_first_byte_is_its_pools_error_and_not_retried(scripted) -> None:
    base = scripted(**FAST)
    cand = scripted(fault="drop", fault_after_chunks=2, **FAST)
    records: list[ProxiedRequest] = []
    proxy = make({"baseline": [scripted_up(base)], "candidate": [scripted_up(cand)]}, records)
    proxy.set_weights(1.0, 0.0, 1)
    got = b""
    async with proxied(proxy) as url, aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with session.post(f"{url}/v1/completions", json=completion(), headers={"X-Request-Id": "d1"}) as resp:
                async for piece in resp.content.iter_any():
                    got += piece
    assert got.count(b"data: {") == 2 and b"[DONE]" not in got, "what was sent so far, then the connection closed"
    (rec,) = records
    assert rec.pool == "candidate" and not rec.ok and not rec.retried and rec.chunk_tokens == [1, 1]
    assert list(await logs_of(cand, 1)) == ["d1"] and base.chunk_logs() == {}, "one request at each end, none duplicated"


@pytest.mark.parametrize(("fault", "words"), [("no_done", "[DONE]"), ("error_event", "server error")])
async def test_a_stream_without_done_or_with_an_error_event_is_an_error(scripted, fault: str, words: str) -> None:
    server = scripted(fault=fault, **FAST)
    records: list[ProxiedRequest] = []
    proxy = make({"baseline": [scripted_up(server)]}, records)
    async with proxied(proxy) as url, aiohttp.ClientSession() as session:
        status, _ = await post(session, url, completion())
    (rec,) = records
    assert status == 200 and not rec.ok and rec.error is not None and words in rec.error and not rec.retried


async def test_a_4xx_is_forwarded_and_not_retried(scripted) -> None:
    base = scripted(**FAST)
    cand = scripted(fault="wrong_model_404", **FAST)
    records: list[ProxiedRequest] = []
    proxy = make({"baseline": [scripted_up(base)], "candidate": [scripted_up(cand)]}, records)
    proxy.set_weights(1.0, 0.0, 0)
    async with proxied(proxy) as url, aiohttp.ClientSession() as session:
        status, data = await post(session, url, completion(model="other"))
    assert status == 404 and json.loads(data)["error"]["message"] == "The model `other` does not exist."
    (rec,) = records
    assert rec.pool == "candidate" and rec.http_status == 404 and not rec.ok and not rec.retried
    assert base.chunk_logs() == {}
