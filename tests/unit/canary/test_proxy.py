"""The canary proxy against upstreams: the scripted (fake vLLM) server for streams and faults, in-test fakes
(``proxy_fakes``) where a test needs to see exactly what arrived or when a connection closed."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
import pytest

from specguard.canary.proxy.capture import REDACTED_PROMPT, CaptureSettings
from specguard.canary.proxy.server import CanaryProxy
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.rollout import SegmentKey, SegmentRule, Split, StickyKey
from specguard.canary.state.records import ProxiedRequest
from specguard.workload.importers import read_log
from tests.unit.canary.proxy_fakes import completion, fake, free_url, proxied

FAST = {"ttft_ms": 5, "interval_ms": 5, "chunks": 4}
TOKEN = "sk-canary-secret-7d1f"


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


def make(
    pools: dict[str, list[Upstream]], records: list[ProxiedRequest], split: Split | None = None, **kw: object
) -> CanaryProxy:
    return CanaryProxy(pools, split or Split(), on_record=records.append, seed=7, **kw)  # type: ignore[arg-type]


async def post(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], rid: str = "r1", **headers: str
) -> tuple[int, bytes]:
    async with session.post(f"{url}/v1/completions", json=body, headers={"X-Request-Id": rid, **headers}) as resp:
        return resp.status, await resp.read()


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


async def test_bodies_and_authorization_arrive_as_sent_and_the_token_goes_nowhere_else(tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    records: list[ProxiedRequest] = []
    capture = CaptureSettings(tmp_path / "capture.jsonl", redact_prompts=False)
    raw = b'{"model":  "scripted", "prompt": "caf\\u00e9 \xe2\x82\xac", "max_tokens": 4,\n "user": "u-1"}'
    async with fake("baseline") as base:
        proxy = make({"baseline": [base.upstream()]}, records, capture=capture)
        async with proxied(proxy) as url, aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {TOKEN}", "X-Trace": "abc", "Content-Type": "application/json", "TE": "trailers"}
            async with session.post(f"{url}/v1/completions", data=raw, headers=headers) as resp:
                answer = await resp.read()
                assert resp.headers["X-Upstream"] == "baseline"
            async with session.post(f"{url}/v1/completions", data=b"{not json", headers=headers) as resp:
                await resp.read()
    seen = base.seen[0]
    assert seen.body == raw and base.seen[1].body == b"{not json", "bytes as sent, unparsable ones too"
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}" and seen.headers["X-Trace"] == "abc"
    assert "TE" not in seen.headers, "hop-by-hop headers stop at the proxy"
    assert json.loads(answer)["usage"]["completion_tokens"] == 1
    assert records[0].ok and records[0].output_tokens == 1 and records[0].ttft_s is None and records[0].e2e_s is not None
    everything = "".join(r.model_dump_json() for r in records) + capture.path.read_text() + caplog.text
    assert TOKEN not in everything and "Authorization" not in capture.path.read_text()


async def test_capture_writes_the_request_log_assess_reads_with_redaction(tmp_path) -> None:
    records: list[ProxiedRequest] = []
    plain, redacted = tmp_path / "plain.jsonl", tmp_path / "redacted.jsonl"
    async with fake("baseline") as base:
        for path, redact in ((plain, False), (redacted, True)):
            proxy = make({"baseline": [base.upstream()]}, records, capture=CaptureSettings(path, redact))
            async with proxied(proxy) as url, aiohttp.ClientSession() as session:
                await post(session, url, completion(prompt="secret prompt", temperature=0.0))
                chat = {"model": "scripted", "messages": [{"role": "user", "content": "secret chat"}]}
                async with session.post(f"{url}/v1/chat/completions", json=chat) as resp:
                    await resp.read()
    logged = list(read_log(plain))
    assert [e.endpoint for e in logged] == ["completions", "chat"]
    assert logged[0].prompt == "secret prompt" and logged[0].sampling.temperature == 0.0 and logged[0].segment == "scripted"
    assert logged[1].messages is not None and logged[1].messages[0].content == "secret chat"
    hidden = list(read_log(redacted))
    assert hidden[0].prompt == REDACTED_PROMPT and hidden[1].messages[0].content == REDACTED_PROMPT  # type: ignore[index]
    assert "secret" not in redacted.read_text()


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


async def test_a_client_disconnect_cancels_the_upstream_request() -> None:
    records: list[ProxiedRequest] = []
    async with fake("baseline", hang=True) as base:
        proxy = make({"baseline": [base.upstream()]}, records)
        async with proxied(proxy) as url:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{url}/v1/completions", json=completion()) as resp:
                    assert (await resp.content.readany()).startswith(b"data: {")
                    resp.close()  # the client goes away mid-stream
            await asyncio.wait_for(base.closed.wait(), timeout=10)  # a guard against hanging, not a measurement
            assert await proxy.drain(10) == 0 and proxy.in_flight() == {"baseline": 0}
    (rec,) = records
    assert rec.client_disconnected and not rec.ok


async def test_models_and_other_paths_go_to_the_baseline() -> None:
    async with fake("baseline") as base, fake("candidate") as cand:
        proxy = make({"baseline": [base.upstream()], "candidate": [cand.upstream()]}, [])
        proxy.set_weights(1.0, 0.0, 5)
        async with proxied(proxy) as url, aiohttp.ClientSession() as session:
            for method, path in (("GET", "/v1/models"), ("POST", "/tokenize?x=1"), ("DELETE", "/anything")):
                async with session.request(method, url + path, data=b"{}") as resp:
                    assert (await resp.json())["upstream"] == "baseline"
    assert [(s.method, s.path) for s in base.seen] == [("GET", "/v1/models"), ("POST", "/tokenize?x=1"), ("DELETE", "/anything")]
    assert cand.seen == []


async def test_sticky_keys_stay_put_as_the_weight_rises_and_keyless_requests_split_by_weight() -> None:
    records: list[ProxiedRequest] = []
    weights = [0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0]
    keys = [f"user-{i}" for i in range(40)]
    async with fake("baseline") as base, fake("candidate") as cand:
        split = Split(sticky=StickyKey(source="header", header="x-user"))
        proxy = make({"baseline": [base.upstream()], "candidate": [cand.upstream()]}, records, split)
        async with proxied(proxy) as url, aiohttp.ClientSession() as session:
            for step, w in enumerate(weights):
                proxy.set_weights(w, 0.0, step)
                for k in keys:
                    await post(session, url, completion(stream=False), rid=f"{step}:{k}", **{"X-User": k})
            proxy.set_weights(0.3, 0.0, len(weights))
            await asyncio.gather(*(post(session, url, completion(stream=False), rid=f"free:{i}") for i in range(400)))
    pools = {r.request_id: r.pool for r in records}
    for k in keys:
        path = [pools[f"{step}:{k}"] for step in range(len(weights))]
        assert path == sorted(path, key=lambda p: p == "baseline", reverse=True), f"{k} moved back: {path}"
    assert all(pools[f"{len(weights) - 1}:{k}"] == "candidate" for k in keys)
    n, p = 400, 0.3
    hits = sum(pools[f"free:{i}"] == "candidate" for i in range(n))
    assert abs(hits - n * p) <= 4.5 * (n * p * (1 - p)) ** 0.5


async def test_segments_and_the_metrics_registry() -> None:
    records: list[ProxiedRequest] = []
    rules = SegmentKey(source="rules", rules=[SegmentRule(name="code", pattern="def ")])
    async with fake("baseline") as base, fake("candidate") as cand:
        proxy = make({"baseline": [base.upstream()], "candidate": [cand.upstream()]}, records, Split(segment=rules))
        proxy.set_weights(0.5, 0.0, 2)
        proxy.count_decision("advance")
        async with proxied(proxy) as url, aiohttp.ClientSession() as session:
            for i in range(20):
                await post(session, url, completion(prompt="def f():" if i % 2 else "hi"), rid=str(i))
    reg = proxy.registry
    assert {r.segment for r in records} == {"code", "default"}
    for pool in ("baseline", "candidate"):
        for seg in ("code", "default"):
            mine = [r for r in records if r.pool == pool and r.segment == seg]
            labels = {"pool": pool, "segment": seg}
            assert (reg.get_sample_value("specguard_canary_requests_total", labels) or 0) == len(mine)
            assert (reg.get_sample_value("specguard_canary_ttft_ms_count", labels) or 0) == len(mine)
            itl = sum(len(r.chunk_tokens) - 1 for r in mine)
            assert (reg.get_sample_value("specguard_canary_itl_ms_count", labels) or 0) == itl
            assert (reg.get_sample_value("specguard_canary_errors_total", labels) or 0) == 0
    assert reg.get_sample_value("specguard_canary_candidate_weight") == 0.5
    assert reg.get_sample_value("specguard_canary_step") == 2
    assert reg.get_sample_value("specguard_canary_in_flight", {"pool": "candidate"}) == 0
    assert reg.get_sample_value("specguard_canary_decisions_total", {"kind": "advance"}) == 1
