"""A scripted OpenAI-compatible streaming server, for exact timing checks and fault injection.

Not a stand-in for vLLM: it generates no text worth reading. It sends each
response's chunks at scheduled times with known token counts and logs, per
request, the monotonic time at which each chunk was handed to the kernel, so
a client's timestamps can be checked against the truth. In flood mode it sends
as fast as it can, for measuring how much a client can ingest.

Run: python -m specguard.simulation.scripted_server --port P --log FILE [options]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel


class Script(BaseModel):
    ttft_ms: float = 50.0
    interval_ms: float = 20.0
    chunks: int = 16
    tokens_pattern: list[int] = [1]
    flood: bool = False
    flood_batch: int = 16
    metrics: str = "new"  # new | old | none | garbage
    usage: str = "continuous"  # continuous (every chunk) | final (last event only) | none


class ChunkLog(BaseModel):
    request_id: str
    start: float
    chunk_sent: list[float]  # monotonic time just before each chunk was written
    chunk_tokens: list[int]
    authorized: bool = False


class ScriptedServer:
    def __init__(self, script: Script, log_path: Path | None) -> None:
        self.script = script
        self.log = log_path.open("a", encoding="utf-8") if log_path else None
        self.finished = 0
        self.generated = 0

    def metrics_text(self) -> str:
        if self.script.metrics == "garbage":
            return "this is {not prometheus\n"
        if self.script.metrics == "none":
            return ""
        kv = "vllm:kv_cache_usage_perc" if self.script.metrics == "new" else "vllm:gpu_cache_usage_perc"
        return (
            f"# TYPE {kv} gauge\n{kv}{{engine=\"0\",model_name=\"scripted\"}} 0.25\n"
            "# TYPE vllm:num_requests_running gauge\n"
            "vllm:num_requests_running{engine=\"0\",model_name=\"scripted\"} 0.0\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            "vllm:num_requests_waiting{engine=\"0\",model_name=\"scripted\"} 0.0\n"
            "# TYPE vllm:request_success counter\n"
            f"vllm:request_success_total{{engine=\"0\",finished_reason=\"length\",model_name=\"scripted\"}} {self.finished}.0\n"
            "# TYPE vllm:generation_tokens counter\n"
            f"vllm:generation_tokens_total{{engine=\"0\",model_name=\"scripted\"}} {self.generated}.0\n"
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        chat = request.path.endswith("/chat/completions")
        rid = request.headers.get("X-Request-Id", "")
        start = time.monotonic()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        s = self.script
        n = min(s.chunks, int(body.get("max_tokens") or s.chunks))
        if s.flood:
            await self._flood(resp, rid, n, chat)
            return resp
        sent: list[float] = []
        tokens: list[int] = []
        total = 0
        for i in range(n):
            target = start + (s.ttft_ms + i * s.interval_ms) / 1000.0
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            k = s.tokens_pattern[i % len(s.tokens_pattern)]
            total += k
            text = " ".join(["x"] * k)
            choice: dict[str, Any] = (
                {"index": 0, "delta": {"content": text}, "finish_reason": None}
                if chat
                else {"index": 0, "text": text, "finish_reason": None}
            )
            if i == n - 1:
                choice["finish_reason"] = "length"
            event: dict[str, Any] = {"id": rid, "choices": [choice]}
            if s.usage == "continuous":
                event["usage"] = {"prompt_tokens": 8, "completion_tokens": total}
            data = b"data: " + json.dumps(event).encode() + b"\n\n"
            # Stamped just before the write: no client can see the chunk earlier, whatever the scheduler
            # does to this process, so a client's error against this stamp is never negative.
            sent.append(time.monotonic())
            await resp.write(data)
            tokens.append(k)
        if s.usage != "none":
            final = {"id": rid, "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": total}}
            await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        self.finished += 1
        self.generated += total
        if self.log is not None:
            self.log.write(ChunkLog(
                request_id=rid, start=start, chunk_sent=sent, chunk_tokens=tokens,
                authorized=request.headers.get("Authorization", "").startswith("Bearer ")).model_dump_json() + "\n")
            self.log.flush()
        return resp

    async def _flood(self, resp: web.StreamResponse, rid: str, n: int, chat: bool) -> None:
        """n one-token events as fast as the socket takes them, several per write; no per-chunk log."""
        rid_json = json.dumps(rid)
        piece = '{"index":0,"delta":{"content":"x"},"finish_reason":null}' if chat else (
            '{"index":0,"text":"x","finish_reason":null}')
        template = ('data: {"id":' + rid_json + ',"choices":[' + piece +
                    '],"usage":{"prompt_tokens":8,"completion_tokens":%d}}\n\n')
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
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

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
        return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", type=Path)
    p.add_argument("--script", default="{}", help="Script fields as JSON")
    a = p.parse_args()
    server = ScriptedServer(Script.model_validate_json(a.script), a.log)
    import uvloop

    web.run_app(server.app(), host=a.host, port=a.port, print=lambda *_: None, access_log=None, backlog=1024,
                loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
