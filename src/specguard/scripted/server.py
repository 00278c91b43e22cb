"""A fake OpenAI-compatible streaming server, for exact timing checks and fault injection.

Not a stand-in for vLLM: it generates no text worth reading. It sends each
response's chunks at scheduled times with known token counts and logs, per
request, the monotonic time at which each chunk was handed to the kernel, so
a client's timestamps can be checked against the truth. In flood mode it sends
as fast as it can, for measuring how much a client can ingest.

With ``fault`` set, every ``fault_every``-th request (1-based, in the order
they arrive, warm-up requests included) fails the way a real server can:

  hang             after ``fault_after_chunks`` chunks, send nothing more and hold the
                   connection open until the client gives up (with 0: never answer at all)
  drop             close the connection after ``fault_after_chunks`` chunks
  http_500         HTTP 500 with a vLLM-style JSON error body, no stream
  wrong_model_404  HTTP 404 with vLLM's "model does not exist" body for any model but
                   the served name (always, whatever ``fault_every``); /v1/models still
                   lists only the served name
  malformed_sse    one non-JSON ``data:`` line after ``fault_after_chunks`` chunks; the
                   stream then goes on to its end
  no_done          the stream ends without ``data: [DONE]``
  no_usage         no usage in any event (like ``usage="none"``, but per request)
  error_event      after ``fault_after_chunks`` chunks, an ``{"error": {...}}`` event and
                   then ``data: [DONE]``, as vLLM ends a stream that failed mid-way

A request with ``return_token_ids: true`` gets vLLM's ``token_ids`` in every chunk
(unless ``token_ids`` is false: a server that ignores the field, like an older vLLM)
and a text of one word per token id. The ids are a function of the prompt alone,
so repeated prompts give equal outputs, except that every ``diverge_every``-th
such request (1-based, in arrival order) changes from token ``diverge_after_tokens``
on: a greedy-output comparison can be given known divergences.

Every request is logged (faulty ones too, with the fault named and the chunks
sent before it). Without ``fault`` the behaviour is the plain scripted stream.

Run: python -m specguard.scripted.server --port P --log FILE [options]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import random
import time
import zlib
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client import Histogram as PromHistogram
from pydantic import BaseModel, Field, model_validator

from specguard.scripted.vllm_buckets import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS

SERVED_NAME = "scripted"
Fault = Literal["hang", "drop", "http_500", "wrong_model_404", "malformed_sse", "no_done", "no_usage", "error_event"]
# Faults that strike part-way through a stream, after fault_after_chunks chunks.
_MID_STREAM = {"hang", "drop", "malformed_sse", "error_event"}
HOLD_POLL_S = 0.05


class Script(BaseModel):
    ttft_ms: float = 50.0
    interval_ms: float = 20.0
    chunks: int = 16
    tokens_pattern: list[int] = [1]
    flood: bool = False
    flood_batch: int = 16
    metrics: str = "new"  # new | old | none | garbage
    usage: str = "continuous"  # continuous (every chunk) | final (last event only) | none
    fault: Fault | None = None
    fault_after_chunks: int = Field(default=2, ge=0)
    fault_every: int = Field(default=1, ge=1)
    # Noise and load, for the canary's statistics tests: each gap (TTFT and every chunk interval) is scaled
    # by a log-normal factor exp(N(0, jitter)) and grows by load_ms_per_stream for every other stream in
    # flight on this server, as a GPU's step time grows with its batch. Both 0: the exact schedule above.
    jitter: float = Field(default=0.0, ge=0)
    load_ms_per_stream: float = Field(default=0.0, ge=0)
    seed: int = 0
    # A speed that changes with the arrival rate, for planting a load crossover at a known rate: while the
    # requests arrive faster than knee_rps (judged over the last knee_window arrivals, this one included),
    # every gap is multiplied by knee_slowdown. Judged by arrivals, not streams in flight, so that the knee
    # is a request rate exactly, whatever the latencies (in-flight counts follow from rate x latency).
    knee_rps: float | None = Field(default=None, gt=0)
    knee_slowdown: float = Field(default=1.0, gt=0)
    knee_window: int = Field(default=4, ge=2)
    token_ids: bool = True
    diverge_after_tokens: int | None = Field(default=None, ge=0)
    diverge_every: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _flood_has_no_faults(self) -> Script:
        if self.flood and self.fault is not None:
            raise ValueError("flood mode takes no fault")
        return self


class ChunkLog(BaseModel):
    request_id: str
    start: float
    chunk_sent: list[float]  # monotonic time just before each chunk was written
    chunk_tokens: list[int]
    authorized: bool = False
    fault: str | None = None  # left out of the log line when None


class ScriptedServer:
    def __init__(self, script: Script, log_path: Path | None) -> None:
        self.script = script
        self.log = log_path.open("a", encoding="utf-8") if log_path else None
        self.finished = 0
        self.generated = 0
        self.received = 0
        self.asked_ids = 0
        self.closing = False  # set at shutdown, so that a hung request lets the server stop at once
        self.in_flight = 0
        self.rng = random.Random(script.seed)
        self.arrivals: list[float] = []  # the last knee_window arrival times (monotonic s)
        # The latency histograms a vLLM server exposes, observed as vLLM does (ITL per chunk, which is per engine
        # step there), on vLLM 0.32's bounds: what the canary judges pools behind HAProxy or a Gateway on.
        self.registry = CollectorRegistry()
        labels = ["engine", "model_name"]

        def histogram(name: str, bounds: tuple[float, ...]) -> PromHistogram:
            return PromHistogram(name, name, labels, buckets=bounds, registry=self.registry)

        self.ttft = histogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS).labels("0", SERVED_NAME)
        self.itl = histogram("vllm:inter_token_latency_seconds", ITL_BUCKETS).labels("0", SERVED_NAME)
        self.tpot = histogram("vllm:request_time_per_output_token_seconds", ITL_BUCKETS).labels("0", SERVED_NAME)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", E2E_BUCKETS).labels("0", SERVED_NAME)
        self.http_requests = Counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            ["handler", "method", "status"],
            registry=self.registry,
        )

    def metrics_text(self) -> str:
        if self.script.metrics == "garbage":
            return "this is {not prometheus\n"
        if self.script.metrics == "none":
            return ""
        kv = "vllm:kv_cache_usage_perc" if self.script.metrics == "new" else "vllm:gpu_cache_usage_perc"
        return (
            f'# TYPE {kv} gauge\n{kv}{{engine="0",model_name="scripted"}} 0.25\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="scripted"}} {self.in_flight}.0\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="scripted"} 0.0\n'
            "# TYPE vllm:request_success counter\n"
            f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="scripted"}} {self.finished}.0\n'
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="scripted"}} {self.generated}.0\n'
        ) + (generate_latest(self.registry).decode() if self.script.metrics == "new" else "")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        try:
            resp = await self._handle(request)
            # As vLLM's API server counts its answers (prometheus-fastapi-instrumentator): by status class.
            self.http_requests.labels(request.path, request.method, f"{resp.status // 100}xx").inc()
            return resp
        finally:
            self.in_flight -= 1

    def _above_knee(self, now: float) -> bool:
        """Whether requests now arrive faster than ``knee_rps`` (see ``Script``); records this arrival."""
        s = self.script
        if s.knee_rps is None:
            return False
        self.arrivals = [*self.arrivals, now][-s.knee_window :]
        span = self.arrivals[-1] - self.arrivals[0]
        return len(self.arrivals) == s.knee_window and (span <= 0 or (len(self.arrivals) - 1) / span > s.knee_rps)

    def _gap_ms(self, base_ms: float, slow: float = 1.0) -> float:
        """One gap of the schedule with the script's noise, load and knee (see ``Script``)."""
        s = self.script
        gap = (base_ms + s.load_ms_per_stream * max(0, self.in_flight - 1)) * slow
        return gap * math.exp(self.rng.gauss(0.0, s.jitter)) if s.jitter > 0 else gap

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        chat = request.path.endswith("/chat/completions")
        rid = request.headers.get("X-Request-Id", "")
        start = time.monotonic()
        s = self.script
        self.received += 1
        fault = self._fault_for(body)
        if fault == "wrong_model_404":
            self._log(request, rid, start, [], [], fault)
            return web.json_response(
                _error_body(f"The model `{body.get('model')}` does not exist.", "NotFoundError", 404, param="model"), status=404
            )
        if fault == "http_500":
            self._log(request, rid, start, [], [], fault)
            return web.json_response(_error_body("scripted fault http_500", "InternalServerError", 500), status=500)
        if fault == "hang" and s.fault_after_chunks == 0:
            await self._hold(request)  # no status line at all; the client's timeout ends it
            self._log(request, rid, start, [], [], fault)
            return web.Response()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = min(s.chunks, int(body.get("max_tokens") or s.chunks))
        if s.flood:
            await self._flood(resp, rid, n, chat)
            return resp
        usage = "none" if fault == "no_usage" else s.usage
        strike = min(s.fault_after_chunks, n) if fault in _MID_STREAM else -1
        sent: list[float] = []
        tokens: list[int] = []
        total = 0
        rid_json = json.dumps(rid)
        slow = s.knee_slowdown if self._above_knee(start) else 1.0
        noisy = s.jitter > 0 or s.load_ms_per_stream > 0 or slow != 1.0
        ids = self._output_ids(body, sum(s.tokens_pattern[i % len(s.tokens_pattern)] for i in range(n)))
        target = start + self._gap_ms(s.ttft_ms, slow) / 1000.0
        for i in range(n):
            if i == strike and await self._strike(fault, request, resp, i):
                self._log(request, rid, start, sent, tokens, fault)
                return resp
            if not noisy:
                target = start + (s.ttft_ms + i * s.interval_ms) / 1000.0
            elif i > 0:
                target += self._gap_ms(s.interval_ms, slow) / 1000.0
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            k = s.tokens_pattern[i % len(s.tokens_pattern)]
            total += k
            # Formatted, not json.dumps'd, and compact like vLLM's own events: the fake must not need a whole core
            # for 4,000 chunks/s, or its delays on a shared core show up as the client's timestamp error (the
            # 200-stream timing test passed 15 of 20 runs with json.dumps here, 38 of 40 with this).
            delta_ids = ids[total - k : total] if ids is not None else None
            text = " ".join(["x"] * k) if delta_ids is None else "".join(f" w{t}" for t in delta_ids)
            fin = '"length"' if i == n - 1 else "null"
            sent_ids = f',"token_ids":{json.dumps(delta_ids)}' if delta_ids is not None and s.token_ids else ""
            piece = (
                f'{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":{fin}{sent_ids}}}'
                if chat
                else f'{{"index":0,"text":"{text}","finish_reason":{fin}{sent_ids}}}'
            )
            use = f',"usage":{{"prompt_tokens":8,"completion_tokens":{total}}}' if usage == "continuous" else ""
            data = f'data: {{"id":{rid_json},"choices":[{piece}]{use}}}\n\n'.encode()
            # Stamped just before the write: no client can see the chunk earlier, whatever the scheduler
            # does to this process, so a client's error against this stamp is never negative.
            sent.append(time.monotonic())
            await resp.write(data)
            tokens.append(k)
        if strike == n and await self._strike(fault, request, resp, n):
            self._log(request, rid, start, sent, tokens, fault)
            return resp
        if usage != "none":
            final = {"id": rid, "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": total}}
            await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        if fault != "no_done":
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        self.finished += 1
        self.generated += total
        self._observe(start, sent)
        self._log(request, rid, start, sent, tokens, fault)
        return resp

    def _output_ids(self, body: dict[str, Any], length: int) -> list[int] | None:
        """The ids of a request that asked for them: the prompt's own sequence, changed from a position on if scripted."""
        if not body.get("return_token_ids"):
            return None
        self.asked_ids += 1
        prompt = json.dumps(body.get("prompt", body.get("messages")), sort_keys=True)
        base = zlib.crc32(prompt.encode()) % 30_000
        ids = [base + j for j in range(length)]
        s = self.script
        if s.diverge_after_tokens is not None and self.asked_ids % s.diverge_every == 0:
            ids[s.diverge_after_tokens :] = [t + 40_000 for t in ids[s.diverge_after_tokens :]]
        return ids

    def _observe(self, start: float, sent: list[float]) -> None:
        if not sent:
            return
        end = time.monotonic()
        self.ttft.observe(sent[0] - start)
        for a, b in zip(sent, sent[1:], strict=False):
            self.itl.observe(b - a)
        if len(sent) > 1:
            self.tpot.observe((sent[-1] - sent[0]) / (len(sent) - 1))
        self.e2e.observe(end - start)

    def _fault_for(self, body: dict[str, Any]) -> Fault | None:
        """This request's fault: the script's on every fault_every-th request; a wrong model always, with 404."""
        s = self.script
        if s.fault == "wrong_model_404":
            return s.fault if body.get("model") != SERVED_NAME else None
        return s.fault if s.fault is not None and self.received % s.fault_every == 0 else None

    async def _strike(self, fault: Fault | None, request: web.Request, resp: web.StreamResponse, after: int) -> bool:
        """Inject a mid-stream fault after ``after`` chunks; True when the stream ends here."""
        if fault == "malformed_sse":
            await resp.write(b"data: {this is not json\n\n")
            return False
        if fault == "error_event":
            err = _error_body(f"scripted fault error_event after {after} chunks", "InternalServerError", 500)
            await resp.write(b"data: " + json.dumps(err).encode() + b"\n\ndata: [DONE]\n\n")
            await resp.write_eof()
            return True
        if fault == "drop":
            # close() sends what is buffered, then FIN: the chunked body is left unterminated.
            if request.transport is not None:
                request.transport.close()
            return True
        if fault == "hang":
            await self._hold(request)
            return True
        return False

    async def _hold(self, request: web.Request) -> None:
        """Send nothing and keep the connection open until the client closes it (or the server stops)."""
        while not self.closing and request.transport is not None and not request.transport.is_closing():
            await asyncio.sleep(HOLD_POLL_S)

    async def _on_shutdown(self, _: web.Application) -> None:
        self.closing = True

    def _log(
        self, request: web.Request, rid: str, start: float, sent: list[float], tokens: list[int], fault: Fault | None
    ) -> None:
        if self.log is None:
            return
        self.log.write(
            ChunkLog(
                request_id=rid,
                start=start,
                chunk_sent=sent,
                chunk_tokens=tokens,
                authorized=request.headers.get("Authorization", "").startswith("Bearer "),
                fault=fault,
            ).model_dump_json(exclude_none=True)
            + "\n"
        )
        self.log.flush()

    async def _flood(self, resp: web.StreamResponse, rid: str, n: int, chat: bool) -> None:
        """n one-token events as fast as the socket takes them, several per write; no per-chunk log."""
        rid_json = json.dumps(rid)
        piece = (
            '{"index":0,"delta":{"content":"x"},"finish_reason":null}'
            if chat
            else ('{"index":0,"text":"x","finish_reason":null}')
        )
        template = (
            'data: {"id":' + rid_json + ',"choices":[' + piece + '],"usage":{"prompt_tokens":8,"completion_tokens":%d}}\n\n'
        )
        batch: list[str] = []
        for i in range(1, n + 1):
            batch.append(template % i)
            if len(batch) == self.script.flood_batch or i == n:
                await resp.write("".join(batch).encode())
                batch.clear()
        final = {"id": rid, "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n}}
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        self.finished += 1
        self.generated += n

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=self.metrics_text(), content_type="text/plain")

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": SERVED_NAME, "object": "model"}]})

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(text="")

    async def version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": "scripted"})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.handle)
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.on_shutdown.append(self._on_shutdown)
        return app


def _error_body(message: str, kind: str, code: int, param: str | None = None) -> dict[str, Any]:
    """vLLM's error shape, for HTTP errors and for an error event in a stream."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", type=Path)
    p.add_argument("--script", default="{}", help="Script fields as JSON")
    a = p.parse_args()
    server = ScriptedServer(Script.model_validate_json(a.script), a.log)
    import uvloop

    # No garbage collection in the fake: a collection between a chunk's stamp and its write would reach the client
    # late and be counted as the client's timestamp error (it did: 1-3 ms, always at the same chunk indices).
    # A test's server lives for seconds and allocates megabytes at most.
    gc.collect()
    gc.freeze()
    gc.disable()

    web.run_app(
        server.app(), host=a.host, port=a.port, print=lambda *_: None, access_log=None, backlog=1024, loop=uvloop.new_event_loop()
    )


if __name__ == "__main__":
    main()
