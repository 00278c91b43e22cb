"""The admin API: status, events, manual control and the proxy's own metrics, behind a bearer token.

It listens on loopback unless the rollout file says ``allow_remote`` (``rollout.Admin``). Every route needs
``Authorization: Bearer <token>``; a request without it, or with another token, is answered 401 and logged
with its method, path and peer, never with what it sent. Tokens are compared in constant time.

    GET  /status            the status document (``canary.control.status``)
    GET  /events?since=N    the event log from seq N
    GET  /metrics           the controller's series (``control.series``) and, with the proxy, the proxy's (scrape
                            with ``authorization: credentials_file``)
    POST /pause | /resume | /promote | /rollback
"""

from __future__ import annotations

import hmac
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from specguard.canary.control.controller import CanaryController, ManualActionRefused
from specguard.canary.spec.rollout import Admin
from specguard.errors import OptionError

__all__ = ["REMOTE_TOKEN_MIN_BYTES", "admin_app", "admin_ssl_context", "read_token", "remote_without_tls_warning"]

_ACTIONS = ("pause", "resume", "promote", "rollback")


# Off loopback the token is all that stands between the network and a rollback: 32 bytes (256 bits as hex or
# base64 of 24 random bytes) is what `openssl rand -hex 16` and most secret generators give at least.
REMOTE_TOKEN_MIN_BYTES = 32


def read_token(admin: Admin) -> str:
    """The admin token from its environment variable or file; an error naming which, before anything starts.

    Off loopback a token shorter than ``REMOTE_TOKEN_MIN_BYTES`` is refused (a one-character token was accepted
    on 0.0.0.0 before issue 28)."""
    token = _read_token(admin)
    size = len(token.encode())
    if admin.remote and size < REMOTE_TOKEN_MIN_BYTES:
        where = f"admin.token_env ({admin.token_env})" if admin.token_env else f"admin.token_file ({admin.token_file})"
        raise OptionError(
            f"{where}: the admin API listens on {admin.listen}, off loopback, so its token needs at least "
            f"{REMOTE_TOKEN_MIN_BYTES} bytes (got {size}); e.g. openssl rand -hex 32"
        )
    return token


def admin_ssl_context(admin: Admin) -> ssl.SSLContext | None:
    """The admin API's TLS context from ``admin.tls`` (None without it); an error naming the file, before start."""
    if admin.tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(admin.tls.cert, admin.tls.key)
    except (OSError, ssl.SSLError) as exc:
        raise OptionError(f"admin.tls: cannot load {admin.tls.cert} with {admin.tls.key}: {exc}") from exc
    return context


def remote_without_tls_warning(admin: Admin) -> str | None:
    if admin.remote and admin.tls is None:
        return (
            f"warning: the admin API listens on {admin.listen} without TLS: its bearer token crosses the network in "
            "clear; set admin.tls: {cert, key}"
        )
    return None


def _read_token(admin: Admin) -> str:
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
