"""The proxy's relay to its client: taken with this aiohttp (fails if an upgrade breaks it), byte-identical to
what the server sent, paused by a slow client only; and the per-token ITL histogram's aggregated observation
equals one observe per token."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram

from specguard.analysis.request_metrics import per_token_itl
from specguard.canary.proxy.metrics import ITL_BUCKETS_MS, observe_per_token
from specguard.canary.proxy.relay import PAUSE_BYTES, ClientSink
from specguard.canary.proxy.server import CanaryProxy
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.proxy.usage_strip import NO_CHANGE, UsageStripper
from specguard.canary.spec.rollout import Split
from specguard.canary.state.records import ProxiedRequest
from tests.unit.canary.proxy_fakes import completion, fake, proxied


class _Upstream:
    """The flow-control calls the sink makes on the upstream response, counted."""

    def __init__(self) -> None:
        self.pauses = 0
        self.resumes = 0

    def pause_reading(self) -> None:
        self.pauses += 1

    def resume_reading(self) -> None:
        self.resumes += 1


class _FakeTransport:
    """A client transport (a fake) that keeps what was written and reports a chosen write-buffer size."""

    def __init__(self, buffered: int = 0) -> None:
        self.written: list[bytes] = []
        self.buffered = buffered

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return self.buffered


def _sink_chunks(n: int, buffered: int) -> tuple[_Upstream, _FakeTransport]:
    upstream = _Upstream()
    transport = _FakeTransport(buffered)
    sink = ClientSink(transport, UsageStripper(NO_CHANGE), upstream)  # type: ignore[arg-type]
    for i in range(n):
        sink.append(b"data: %d\n\n" % i)
    return upstream, transport


def test_reads_are_forwarded_as_http_chunks_at_arrival_and_never_pause_the_upstream() -> None:
    upstream, transport = _sink_chunks(10_000, buffered=0)
    sent = [b"data: %d\n\n" % i for i in range(10_000)]
    assert transport.written == [b"%x\r\n%b\r\n" % (len(d), d) for d in sent] and upstream.pauses == 0


def test_a_client_that_does_not_read_pauses_the_upstream_once() -> None:
    upstream, transport = _sink_chunks(5, buffered=PAUSE_BYTES + 1)
    assert len(transport.written) == 5 and upstream.pauses == 1


async def test_the_proxy_relays_from_data_received_with_this_aiohttp_and_sends_what_the_server_sent() -> None:
    records: list[ProxiedRequest] = []
    async with fake("baseline") as base:
        proxy = CanaryProxy({"baseline": [base.upstream()]}, Split(), on_record=records.append, seed=7)
        async with proxied(proxy) as url, aiohttp.ClientSession() as session:
            async with session.post(f"{url}/v1/completions", json=completion()) as resp:
                body = await resp.read()
            async with session.post(f"{base.url}/v1/completions", json=completion()) as resp:
                direct = await resp.read()
    assert proxy.relayed_fast == 1, "aiohttp's StreamWriter internals changed: the proxy fell back to awaited writes"
    assert body == direct and body.endswith(b"data: [DONE]\n\n")
    (rec,) = records
    assert rec.ok and rec.output_tokens == sum(rec.chunk_tokens) and len(rec.chunk_times_s) == len(rec.chunk_tokens)


def _samples(h: Histogram) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels.get("le", "")): s.value for m in h.collect() for s in m.samples}


def test_per_token_itl_aggregated_equals_one_observe_per_token() -> None:
    # Gaps on bucket bounds, between them, multi-token chunks, a zero-token chunk, above the last bound.
    times = [0.0, 0.0005, 0.0105, 0.0305, 0.0306, 0.5306, 2.5306, 2.5406]
    tokens = [1, 1, 1, 2, 0, 3, 1, 4]
    one = Histogram("itl_one", "x", buckets=ITL_BUCKETS_MS, registry=CollectorRegistry())
    agg = Histogram("itl_agg", "x", buckets=ITL_BUCKETS_MS, registry=CollectorRegistry())
    for gap in per_token_itl(times, tokens):
        one.observe(gap * 1000.0)
    observe_per_token(agg, times, tokens)
    a = {(n.replace("itl_one", ""), le): v for (n, le), v in _samples(one).items() if not n.endswith("_created")}
    b = {(n.replace("itl_agg", ""), le): v for (n, le), v in _samples(agg).items() if not n.endswith("_created")}
    assert a.keys() == b.keys() and a[("_count", "")] == sum(tokens[1:])
    for key, value in a.items():
        assert abs(b[key] - value) <= 1e-9 * max(1.0, abs(value)), key


async def test_a_slow_client_gets_a_large_stream_whole_through_the_relays_backpressure() -> None:
    """32 MiB through a client that stops reading for a while: far more than the sockets buffer, so the relay
    pauses the upstream and must resume it; every byte arrives, in order."""
    piece = bytes(range(256)) * 256  # 64 KiB
    n = 512

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for i in range(n):
            await response.write(i.to_bytes(4, "big") + piece)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    records: list[ProxiedRequest] = []
    proxy = CanaryProxy({"baseline": [Upstream(base, base + "/metrics")]}, Split(), on_record=records.append, seed=7)
    try:
        async with proxied(proxy) as url, aiohttp.ClientSession() as session:
            async with session.post(f"{url}/v1/completions", data=b"{}") as resp:
                first = await resp.content.readany()
                await asyncio.sleep(0.5)  # not reading: the buffers fill and the relay must hold the upstream back
                body = first + await resp.read()
    finally:
        await runner.cleanup()
    assert proxy.relayed_fast == 1
    assert body == b"".join(i.to_bytes(4, "big") + piece for i in range(n))
    (rec,) = records
    assert rec.http_status == 200 and not rec.client_disconnected and rec.stream_end_s is not None
    assert rec.error == "response body is not JSON", "the whole body was relayed and measured (it is not JSON)"
