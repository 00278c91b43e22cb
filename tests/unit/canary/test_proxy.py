"""The canary proxy against in-test fakes (``proxy_fakes``), where a test needs to see exactly what arrived or when
a connection closed; against the scripted (fake vLLM) server's streams and faults in
tests/system/test_canary_proxy_scripted.py."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp

from specguard.canary.proxy.capture import REDACTED_PROMPT, CaptureSettings
from specguard.canary.proxy.server import CanaryProxy
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.rollout import SegmentKey, SegmentRule, Split, StickyKey
from specguard.canary.state.records import ProxiedRequest
from specguard.workload.importers import read_log
from tests.unit.canary.proxy_fakes import completion, fake, proxied

TOKEN = "sk-canary-secret-7d1f"


def make(
    pools: dict[str, list[Upstream]], records: list[ProxiedRequest], split: Split | None = None, **kw: object
) -> CanaryProxy:
    return CanaryProxy(pools, split or Split(), on_record=records.append, seed=7, **kw)  # type: ignore[arg-type]


async def post(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], rid: str = "r1", **headers: str
) -> tuple[int, bytes]:
    async with session.post(f"{url}/v1/completions", json=body, headers={"X-Request-Id": rid, **headers}) as resp:
        return resp.status, await resp.read()


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
