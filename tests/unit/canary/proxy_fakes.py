"""Fakes for the proxy's tests: small in-process aiohttp upstreams where a test needs exact control.

``FakeUpstream`` answers every path, remembers each request's method, path, headers and body bytes as they
arrived, and names itself in an ``X-Upstream`` header. Its completions stream is vLLM-shaped (usage only
when continuous usage was asked for). ``hang=True`` sends one chunk and then waits for the proxy to close
the connection, noting that it did. ``free_url`` is a port with nothing listening: connections are refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from specguard.canary.proxy.server import CanaryProxy
from specguard.canary.proxy.upstream import Upstream
from specguard.vllm.process import free_port


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeUpstream:
    name: str
    hang: bool = False
    seen: list[Seen] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path_qs, dict(request.headers), body))
        headers = {"X-Upstream": self.name}
        if not request.path.endswith("completions"):
            return web.json_response({"upstream": self.name, "path": request.path_qs}, headers=headers)
        obj = json.loads(body) if body.startswith(b"{") else {}
        if not obj.get("stream"):
            answer = {"choices": [{"text": "ok", "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
            return web.json_response(answer, headers=headers)
        resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
        await resp.prepare(request)
        options = obj.get("stream_options") or {}
        continuous = options.get("include_usage") and options.get("continuous_usage_stats")
        for i in range(2):
            usage = f',"usage":{{"prompt_tokens":3,"total_tokens":{4 + i},"completion_tokens":{i + 1}}}' if continuous else ""
            fin = '"length"' if i == 1 else "null"
            await resp.write(
                f'data: {{"id":"c","choices":[{{"index":0,"text":"t{i}","finish_reason":{fin}}}]{usage}}}\n\n'.encode()
            )
            if self.hang:
                while request.transport is not None and not request.transport.is_closing():
                    await asyncio.sleep(0.01)
                self.closed.set()
                return resp
        if options.get("include_usage"):
            await resp.write(
                b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}\n\n'
            )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def upstream(self) -> Upstream:
        return Upstream(self.url, self.url + "/metrics")


@asynccontextmanager
async def serving(app: web.Application, handler_cancellation: bool = False) -> AsyncIterator[str]:
    runner = web.AppRunner(app, handler_cancellation=handler_cancellation)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def fake(name: str, hang: bool = False) -> AsyncIterator[FakeUpstream]:
    upstream = FakeUpstream(name, hang)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    async with serving(app) as url:
        upstream.url = url
        yield upstream


@asynccontextmanager
async def proxied(proxy: CanaryProxy) -> AsyncIterator[str]:
    """The proxy served as the controller serves it (``runner()``: handler cancellation on)."""
    runner = proxy.runner()
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
        await proxy.close()


def free_url() -> Upstream:
    url = f"http://127.0.0.1:{free_port()}"
    return Upstream(url, url + "/metrics")


def completion(stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "prompt": "hello", "max_tokens": 4, "stream": stream, **extra}
