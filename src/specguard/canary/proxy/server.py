"""The canary's reverse proxy: an OpenAI-compatible front that splits traffic between the pools and measures it.

``POST /v1/completions`` and ``/v1/chat/completions`` are split (``split.choose_pool`` on the sticky key's
hash, or on a seeded random number per request), balanced inside the pool, measured with bench's
definitions (times from the upstream send, reads stamped in the upstream connection's ``data_received``:
``upstream_http``, the proxy's own HTTP/1.1 client, and ``relay``, which writes each read to the
client from there) and recorded once
per upstream attempt through ``on_record``. Everything else (``GET /v1/models`` included) passes through to
the baseline pool, unrecorded. Bodies stream read by read, never buffered; the only change the proxy
makes is asking for continuous usage (``usage_strip``), which it takes back out of the response.

Retries: a failure before the first byte of the response body (refused, reset, no first byte within
``first_byte_timeout_s``, HTTP 5xx) is retried once on the baseline (another baseline server when the
failure was on one and there is another); the failed attempt is recorded against its pool. After the first
byte nothing is retried: the client gets what was sent and then the connection closes.

Client disconnect: run the app with ``handler_cancellation=True`` (``CanaryProxy.runner()`` does); the
cancelled handler closes the upstream response, so the upstream sees its connection close. Without it the
proxy notices at its next write to the client.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import itertools
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from specguard.canary.proxy.capture import CaptureSettings, CaptureWriter
from specguard.canary.proxy.metrics import ProxyMetrics
from specguard.canary.proxy.plumbing import error_body, forward_headers, measure_response
from specguard.canary.proxy.relay import ClientSink, chunk_writer
from specguard.canary.proxy.routing import Api, SegmentRules, sticky_key
from specguard.canary.proxy.split import LeastOutstanding, RoundRobin, choose_pool, key_hash
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.proxy.upstream_http import UpstreamClient, UpstreamResponse
from specguard.canary.proxy.usage_strip import NO_CHANGE, UsagePlan, UsageStripper, request_with_usage
from specguard.canary.spec import rollout
from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state.records import ProxiedRequest
from specguard.loadgen.client import StreamResult

__all__ = ["GC_THRESHOLDS", "MAX_REQUEST_BYTES", "CanaryProxy", "Upstream", "tune_gc"]

log = logging.getLogger(__name__)

# aiohttp's default request limit is 1 MiB; a long-context chat request is larger. vLLM itself sets none.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
CLIENT_GONE = "client disconnected before the response finished"
# A stream still in flight when the drain deadline passed at shutdown: cut by specguard, an error of neither pool
# (counted like a client that went away, so no pool is judged on it), and counted in the ``stopped`` event.
CUT_AT_SHUTDOWN = "cut at shutdown: the drain deadline passed with the stream in flight"
# Young collections every 50,000 allocations net instead of 700: each request allocates thousands of short-lived
# objects (records, parsed chunks), so the default runs a collection every few chunks across 256 streams.
GC_THRESHOLDS = (50_000, 20, 100)
# Finished attempts are measured when no request has arrived for MEASURE_QUIET_S, and at the latest
# MEASURE_MAX_DELAY_S after they finished. bench/proxy_overhead.py at 256 streams (one run, 2 shared cores):
# with measurement switched off, the TTFT the proxy adds fell from +40 to +10 ms at p50 and from +57 to +37 ms
# at p99: the ~0.4 ms per attempt (SSE parse, record, metrics), paid as one engine step ends a whole batch,
# lands exactly when that batch's clients send their next requests. Measured in the quiet after the wave
# it delays chunks instead, which arrive 20 ms apart per stream.
MEASURE_QUIET_S = 0.003
MEASURE_MAX_DELAY_S = 0.25


def tune_gc() -> None:
    """For the proxy's process, once start-up is done: freeze what exists and collect less often.

    ``gc.freeze`` moves every object alive now (modules, the app, the config) out of the collector's reach,
    so a full collection no longer walks them: the canary saw GC pauses of up to 74 ms at 256 streams
    (bench/proxy_overhead.py), each one a stall of every stream. Reference counting still frees nearly
    everything; the collector only finds cycles, later.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class _BeforeFirstByte(Exception):
    """An attempt that failed before the response body's first byte: it may be retried."""

    def __init__(self, error: str, client_status: int) -> None:
        super().__init__(error)
        self.error = error
        self.client_status = client_status  # what the client is answered when no retry is left


@dataclass
class _Attempt:
    pool: PoolName
    index: int
    server: Upstream
    in_flight: int  # on this server when it was sent, not counting it
    res: StreamResult = field(default_factory=StreamResult)
    client_disconnected: bool = False
    released: bool = False


class CanaryProxy:
    def __init__(
        self,
        pools: Mapping[PoolName, Sequence[Upstream]],
        split: rollout.Split,
        *,
        on_record: Callable[[ProxiedRequest], None],
        registry: CollectorRegistry | None = None,
        capture: CaptureSettings | None = None,
        seed: int | None = None,
        first_byte_timeout_s: float = 60.0,
        seq_start: int = 0,
        seq_step: int = 1,
    ) -> None:
        if not pools.get("baseline"):
            raise ValueError("the proxy needs at least one baseline server")
        self.pools: dict[PoolName, list[Upstream]] = {name: list(servers) for name, servers in pools.items() if servers}
        self.split = split
        self.on_record = on_record
        self.first_byte_timeout_s = first_byte_timeout_s
        self.relayed_fast = 0  # responses relayed from data_received (the rest went through the plain loop)
        self.metrics = ProxyMetrics(registry)
        self.registry = self.metrics.registry
        self._segments = SegmentRules(split.segment)
        self._rr = {name: RoundRobin(len(s)) for name, s in self.pools.items()}
        self._lo = {name: LeastOutstanding(len(s)) for name, s in self.pools.items()}
        self._server_in_flight: dict[str, int] = {s.base_url: 0 for ss in self.pools.values() for s in ss}
        self._rng = random.Random(seed)
        # With ``workers: N`` worker k numbers its requests k, k + N, k + 2N, ...: ``seq`` (and the default
        # request id ``canary-SEQ``) stays unique across the processes, and ``seq % N`` says which one served it.
        self._seq = itertools.count(seq_start, seq_step)
        self._candidate = 0.0
        self._control = 0.0
        self._step = 0
        self._capture = CaptureWriter(capture) if capture is not None else None
        self._client = UpstreamClient()
        self._handling = 0
        self.shutting_down = False  # set by begin_shutdown: a handler cancelled from now on was cut by the drain
        self.cut_at_shutdown = 0
        self._idle = asyncio.Event()
        self._idle.set()
        # attempts done, not yet measured, each with the time.monotonic() it was queued at
        self._pending: collections.deque[tuple[float, _Job]] = collections.deque()
        self._measurer: asyncio.Task[None] | None = None
        self._last_arrival = 0.0  # time.monotonic() of the latest request's arrival

    # -- the controller's side ------------------------------------------------------------------------

    def set_weights(self, candidate: float, control: float, step: int) -> None:
        """The shares of NEW requests (fractions in [0, 1]); requests in flight keep their pool."""
        choose_pool(None, candidate, 0.0, control)  # the same checks as every routing decision
        if step < 0:
            raise ValueError(f"step must be >= 0 (got {step})")
        if candidate > 0 and "candidate" not in self.pools:
            raise ValueError("a candidate weight without candidate servers")
        if control > 0 and "control" not in self.pools:
            raise ValueError("a control weight without control servers")
        self._candidate, self._control, self._step = candidate, control, step
        self.metrics.candidate_weight.set(candidate)
        self.metrics.control_weight.set(control)
        self.metrics.step.set(step)

    def count_decision(self, kind: str) -> None:
        self.metrics.count_decision(kind)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_route("*", "/{tail:.*}", self._passthrough)
        return app

    def runner(self) -> web.AppRunner:
        """An AppRunner for ``app()`` that cancels a handler when its client disconnects (and so its upstream)."""
        return web.AppRunner(self.app(), handler_cancellation=True)

    def weights(self) -> tuple[float, float, int]:
        """The shares and step in effect for new requests: what a worker reports back to the controller."""
        return self._candidate, self._control, self._step

    def in_flight(self) -> dict[PoolName, int]:
        return {name: sum(self._server_in_flight[s.base_url] for s in servers) for name, servers in self.pools.items()}

    def begin_shutdown(self) -> None:
        """From now on a handler that is cancelled was cut by the drain deadline, not left by its client."""
        self.shutting_down = True

    async def drain(self, deadline_s: float) -> int:
        """Wait until no request is being handled, or ``deadline_s`` seconds; how many were still in flight."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=deadline_s)
        except TimeoutError:
            pass
        self.flush()
        return self._handling

    async def close(self) -> None:
        self.flush()
        await self._client.close()
        if self._capture is not None:
            self._capture.close()

    # -- routing ----------------------------------------------------------------------------------------

    def _acquire(self, pool: PoolName, avoid: int | None = None) -> int:
        n = len(self.pools[pool])
        if self.split.balance == "round_robin":
            index = self._rr[pool].choose()
            if index == avoid and n > 1:
                index = self._rr[pool].choose()
        else:
            lo = self._lo[pool]
            if avoid is not None and n > 1:
                index = min((i for i in range(n) if i != avoid), key=lambda i: lo.outstanding[i])
                lo.outstanding[index] += 1
            else:
                index = lo.acquire()
        server = self.pools[pool][index]
        self._server_in_flight[server.base_url] += 1
        self.metrics.in_flight_of[pool].inc()
        return index

    def _release(self, pool: PoolName, index: int) -> None:
        if self.split.balance == "least_outstanding":
            self._lo[pool].release(index)
        self._server_in_flight[self.pools[pool][index].base_url] -= 1
        self.metrics.in_flight_of[pool].dec()

    def _begin(self) -> None:
        self._handling += 1
        self._idle.clear()

    def _end(self) -> None:
        self._handling -= 1
        if self._handling == 0:
            self._idle.set()

    # -- handlers ---------------------------------------------------------------------------------------

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._api(request, "completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._api(request, "chat")

    async def _api(self, request: web.Request, api: Api) -> web.StreamResponse:
        self._begin()
        try:
            return await self._route(request, api)
        finally:
            self._end()

    async def _route(self, request: web.Request, api: Api) -> web.StreamResponse:
        received_unix = time.time()
        self._last_arrival = time.monotonic()
        seq = next(self._seq)
        raw = await request.read()
        sent_body, body, plan = request_with_usage(raw)
        stream = isinstance(body, dict) and body.get("stream") is True
        key = sticky_key(self.split.sticky, request.headers, body)
        weight, control, step = self._candidate, self._control, self._step
        pool = choose_pool(key_hash(key) if key is not None else None, weight, self._rng.random(), control)
        head: dict[str, Any] = {
            "seq": seq,
            "request_id": request.headers.get("X-Request-Id") or f"canary-{seq}",
            "received_unix": received_unix,
            "step": step,
            "candidate_weight": weight,
            "segment": self._segments.segment(api, request.headers, body),
            "api": api,
            "stream": stream,
        }
        headers = forward_headers(request.headers.items(), request.headers.get("Connection"))
        send = _Send(request.method, request.path_qs, sent_body, headers, plan, hold=body_n(body) == 1)
        current = self._start(pool, None)
        number = 1
        try:
            try:
                response = await self._exchange(request, current, send, retry=True)
            except _BeforeFirstByte:
                self._finish(current)
                self._defer((head, current, number, True, None))
                avoid = current.index if current.pool == "baseline" else None
                current, number = self._start("baseline", avoid), 2
                response = await self._exchange(request, current, send, retry=False)
        except asyncio.CancelledError:
            # The client went away (aiohttp cancelled the handler), or the drain deadline passed at shutdown;
            # leaving closed the upstream response.
            current.client_disconnected = True
            if self.shutting_down and current.res.error is None:
                current.res.error = CUT_AT_SHUTDOWN
                self.cut_at_shutdown += 1
            current.res.error = current.res.error or CLIENT_GONE
            self._finish(current)
            self._defer((head, current, number, False, None))
            raise
        self._finish(current)
        self._defer((head, current, number, False, (api, body)))
        return response

    def _start(self, pool: PoolName, avoid: int | None) -> _Attempt:
        index = self._acquire(pool, avoid)
        server = self.pools[pool][index]
        return _Attempt(pool, index, server, self._server_in_flight[server.base_url] - 1)

    def _finish(self, attempt: _Attempt) -> None:
        if not attempt.released:
            attempt.released = True
            self._release(attempt.pool, attempt.index)

    async def _exchange(self, request: web.Request, attempt: _Attempt, send: _Send, retry: bool) -> web.StreamResponse:
        """Send upstream and relay the answer; raises ``_BeforeFirstByte`` for an early failure when ``retry``."""
        res = attempt.res
        sent_at = time.monotonic()
        upstream: UpstreamResponse | None = None
        try:
            try:
                url = attempt.server.base_url + send.path
                # The first-byte timeout runs from here to the body's first byte (the client's own timer); a stream
                # may rightly run for minutes after it.
                upstream = await self._client.request(
                    send.method, url, send.headers, send.body, res, sent_at, self.first_byte_timeout_s
                )
                res.http_status = upstream.status
                if upstream.status >= 500 and retry:
                    async with asyncio.timeout(self.first_byte_timeout_s):
                        await upstream.read_all()
                    text = b"".join(d for _, d in res.pieces)[:500].decode("utf-8", errors="replace")
                    raise _BeforeFirstByte(f"HTTP {upstream.status}: {text}", upstream.status)
                first = await upstream.read()
            except TimeoutError as exc:
                raise _BeforeFirstByte(f"no response within {self.first_byte_timeout_s:g} s", 504) from exc
            except OSError as exc:
                raise _BeforeFirstByte(f"{type(exc).__name__}: {exc}", 502) from exc
        except _BeforeFirstByte as cause:
            res.error = cause.error
            if retry:
                raise
            kind = "GatewayTimeout" if cause.client_status == 504 else "BadGateway"
            body = error_body(f"upstream {attempt.pool} server failed: {cause.error}", kind, cause.client_status)
            return web.Response(status=cause.client_status, body=body, content_type="application/json")
        finally:
            if upstream is not None and res.error is not None:
                upstream.close()
        try:
            plan = send.plan if upstream.status == 200 else NO_CHANGE
            return await self._relay(request, upstream, attempt, first, plan, send.hold, sent_at)
        finally:
            upstream.close()  # after a complete body this only drops the connection's reference; mid-stream it closes

    async def _relay(
        self,
        request: web.Request,
        upstream: UpstreamResponse,
        attempt: _Attempt,
        first: bytes,
        plan: UsagePlan,
        hold: bool,
        sent_at: float,
    ) -> web.StreamResponse:
        """Forward the response from its first read on, each read as it arrives."""
        res = attempt.res
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.extend(forward_headers(upstream.headers.items(), upstream.headers.get("Connection")))
        if plan == NO_CHANGE and upstream.content_length is not None:
            response.content_length = upstream.content_length
        stripper = UsageStripper(plan, hold)
        data = first
        try:
            await response.prepare(request)
            direct = chunk_writer(response) if data else None
            if direct is not None:
                writer, transport = direct
                sink = ClientSink(transport, stripper, upstream)
                self.relayed_fast += 1
                sink.send(stripper.feed(first))
                sink.send(stripper.feed(upstream.forward(sink.append)))  # what arrived since, in order
                try:
                    await sink.run(writer)
                except OSError as exc:
                    if sink.error is exc:
                        raise ConnectionResetError(str(exc)) from exc  # the client's side broke
                    res.error = f"stream broke: {type(exc).__name__}: {exc}"
                data = b""
            while data:
                out = stripper.feed(data)
                if out:
                    await response.write(out)
                try:
                    data = await upstream.read()
                except OSError as exc:
                    res.error = f"stream broke: {type(exc).__name__}: {exc}"
                    break
            tail = stripper.finish()
            if tail:
                await response.write(tail)
            res.stream_end = time.monotonic() - sent_at
            if res.error is not None:
                # After the first byte nothing is retried: the client has what was sent, then the connection closes.
                if request.transport is not None:
                    request.transport.close()
                return response
            await response.write_eof()
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
            attempt.client_disconnected = True
            res.error = CLIENT_GONE
        return response

    def _defer(self, job: _Job) -> None:
        """Measure and record an attempt soon, off the handler's path and out of the way of new requests.

        When one engine step ends a whole batch, hundreds of handlers finish in the same loop turn; measured
        there (about 0.4 ms each: the SSE parse, the record, the metrics), they stalled every other stream's
        relay and every new request's first byte for 100 ms and more at 256 streams (bench/proxy_overhead.py),
        and the batch's clients send their next requests at that moment. One task measures the queue instead,
        one attempt per loop turn, while no request has arrived for ``MEASURE_QUIET_S`` (or once the oldest
        waited ``MEASURE_MAX_DELAY_S``, so that records reach the analysis windows in time under steady load).
        """
        self._pending.append((time.monotonic(), job))
        if self._measurer is None or self._measurer.done():
            self._measurer = asyncio.get_running_loop().create_task(self._measure_pending())

    async def _measure_pending(self) -> None:
        while self._pending:
            now = time.monotonic()
            wait = min(self._last_arrival + MEASURE_QUIET_S, self._pending[0][0] + MEASURE_MAX_DELAY_S) - now
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            self._record(self._pending.popleft()[1])
            await asyncio.sleep(0)

    def flush(self) -> None:
        """Measure and record every attempt still queued (``drain`` and ``close`` call it)."""
        while self._pending:
            self._record(self._pending.popleft()[1])

    def _record(self, job: _Job) -> None:
        head, attempt, number, retried, captured = job
        try:
            record = self._emit(head, attempt, number, retried)
            if captured is not None and self._capture is not None:
                self._capture.write(captured[0], captured[1], record)
        except Exception:
            log.exception("measuring request %s failed", head["request_id"])

    def _emit(self, head: dict[str, Any], attempt: _Attempt, number: int, retried: bool) -> ProxiedRequest:
        res = attempt.res
        m = measure_response(res, head["api"], head["stream"])
        record = ProxiedRequest(
            **head,
            attempt=number,
            retried=retried,
            pool=attempt.pool,
            server=attempt.server.base_url,
            in_flight=attempt.in_flight,
            ok=m.ok and not attempt.client_disconnected,
            error=m.error,
            http_status=res.http_status,
            client_disconnected=attempt.client_disconnected,
            **m.record_fields(),
        )
        self.metrics.observe(record)
        try:
            self.on_record(record)
        except Exception:
            log.exception("the canary's record callback failed (request %s)", record.request_id)
        return record

    async def _passthrough(self, request: web.Request) -> web.StreamResponse:
        """Any other method and path, to the baseline pool, unmeasured and unrecorded; no retry."""
        self._begin()
        attempt = self._start("baseline", None)
        try:
            body = await request.read()
            headers = forward_headers(request.headers.items(), request.headers.get("Connection"))
            send = _Send(request.method, request.path_qs, body, headers, NO_CHANGE, hold=False)
            return await self._exchange(request, attempt, send, retry=False)
        finally:
            self._finish(attempt)
            self._end()


# (head, attempt, attempt number, retried, (api, client body) to capture or None)
_Job = tuple[dict[str, Any], _Attempt, int, bool, tuple[Api, Any] | None]


@dataclass(frozen=True)
class _Send:
    method: str
    path: str
    body: bytes
    headers: CIMultiDict[str]
    plan: UsagePlan
    hold: bool  # hold terminal chunks for the fingerprint (only with one choice: n > 1 would stall the stream)


def body_n(body: Any) -> int:
    """The request's ``n`` (choices per prompt), 1 when absent or odd."""
    n = body.get("n") if isinstance(body, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else 1
