"""The admin API: status, events, manual control and the proxy's own metrics, behind a bearer token.

It listens on loopback unless the rollout file says ``allow_remote`` (``rollout.Admin``). Every route needs
``Authorization: Bearer <token>``; a request without it, or with another token, is answered 401 and logged
with its method, path and peer, never with what it sent. Tokens are compared in constant time.

    GET  /status            the status document (``canary.control.status``)
    GET  /events?since=N    the event log from seq N
    GET  /metrics           the proxy's Prometheus metrics (scrape with ``authorization: credentials_file``)
    POST /pause | /resume | /promote | /rollback
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from specguard.canary.control.controller import CanaryController, ManualActionRefused
from specguard.canary.spec.rollout import Admin
from specguard.errors import OptionError

__all__ = ["admin_app", "read_token"]

_ACTIONS = ("pause", "resume", "promote", "rollback")


def read_token(admin: Admin) -> str:
    """The admin token from its environment variable or file; an error naming which, before anything starts."""
    if admin.token_env is not None:
        token = os.environ.get(admin.token_env, "").strip()
        if not token:
            raise OptionError(f"admin.token_env: the environment variable {admin.token_env} is not set or empty")
        return token
    assert admin.token_file is not None  # Admin requires exactly one of the two
    path = Path(admin.token_file)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise OptionError(f"admin.token_file: cannot read {path}: {exc.strerror or exc}") from exc
    if not token:
        raise OptionError(f"admin.token_file: {path} is empty")
    return token


def _authorized(request: web.Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def admin_app(
    controller: CanaryController, token: str, registry: CollectorRegistry, log: Callable[[str], None]
) -> web.Application:
    @web.middleware
    async def auth(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if not _authorized(request, token):
            log(f"admin: refused {request.method} {request.path} from {request.remote}: missing or wrong bearer token")
            return web.json_response({"error": "a bearer token is required"}, status=401, headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    async def status(_: web.Request) -> web.Response:
        return web.json_response(controller.status())

    async def events(request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            return web.json_response({"error": "since: expected an integer event seq"}, status=400)
        return web.json_response([e.model_dump(mode="json") for e in controller.store.events(since_seq=since)])

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def action(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(_: web.Request) -> web.Response:
            try:
                return web.json_response(await controller.request(name))
            except ManualActionRefused as exc:
                return web.json_response({"error": str(exc)}, status=409)

        return handle

    app = web.Application(middlewares=[auth])
    app.router.add_get("/status", status)
    app.router.add_get("/events", events)
    app.router.add_get("/metrics", metrics)
    for name in _ACTIONS:
        app.router.add_post(f"/{name}", action(name))
    return app
