"""A FAKE Grafana for tests: an aiohttp server that records every request to ``POST /api/annotations`` and
answers as told (Grafana's documented 200 answer, another status, or nothing until released).

No Grafana runs here; what is under test is what the canary sends, which this records exactly as received
(method, path, headers, JSON body), and how the canary copes with the answers it cannot control.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from specguard.vllm.process import free_port


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeGrafana:
    """``status``: what to answer; with ``hang``, each request waits for ``release`` (a Grafana that hangs)."""

    status: int = 200
    hang: bool = False
    received: list[Received] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _annotate(self, request: web.Request) -> web.Response:
        self.received.append(Received(request.method, request.path, dict(request.headers), await request.json()))
        self.arrived.set()
        if self.hang:
            await self.release.wait()
        if self.status == 200:
            return web.json_response({"message": "Annotation added", "id": len(self.received)})
        return web.json_response({"message": "fake Grafana failure"}, status=self.status)

    async def start(self) -> FakeGrafana:
        app = web.Application()
        app.router.add_post("/api/annotations", self._annotate)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()
