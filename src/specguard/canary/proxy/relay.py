"""The proxy's relay to its client: each upstream read written to the client's transport inside ``data_received``.

``upstream_http`` hands every read's payload to ``ClientSink.append`` as it arrives; the sink runs the
incremental ``UsageStripper`` and writes the result to the client's transport as one HTTP/1.1 chunk. The
handler only waits for the end of the body. Awaiting each read and each write instead (aiohttp's
``StreamResponse.write`` per read) woke the handler task twice per chunk and went through aiohttp's
StreamWriter each time: about 50 us per chunk of the proxy's CPU at 256 streams (bench/proxy_overhead.py,
2-core dev VM).

Backpressure comes from the CLIENT: when the client transport's write buffer passes ``PAUSE_BYTES`` the
upstream connection stops being read, and the handler resumes it once aiohttp's protocol says the client
drained (``StreamWriter.drain``).

``chunk_writer`` returns None (the caller keeps the plain loop, one awaited write per read) when aiohttp's
response is not plainly chunked (a Content-Length, compression) or its internals are not as expected;
``tests/unit/canary/test_proxy_relay.py`` fails if an aiohttp upgrade breaks the fast path.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from specguard.canary.proxy.upstream_http import UpstreamResponse
from specguard.canary.proxy.usage_strip import UsageStripper

__all__ = ["PAUSE_BYTES", "ClientSink", "chunk_writer"]

# The client side's write buffer above which the upstream stops being read: aiohttp's own StreamWriter
# drains above 64 KiB (http_writer.LIMIT); a stream of SSE chunks never gets near it unless the client stalls.
PAUSE_BYTES = 64 * 1024


def chunk_writer(response: web.StreamResponse) -> tuple[Any, asyncio.Transport] | None:
    """The prepared response's writer and the client's transport, when chunks may be written to it directly."""
    writer: Any = getattr(response, "_payload_writer", None)
    transport: Any = getattr(writer, "transport", None)
    if (
        writer is None
        or not all(hasattr(transport, name) for name in ("write", "is_closing", "get_write_buffer_size"))
        or getattr(writer, "chunked", False) is not True
        or getattr(writer, "_compress", True) is not None
        or getattr(writer, "length", True) is not None
        or getattr(writer, "_on_chunk_sent", True) is not None
        or not hasattr(writer, "send_headers")
        or not hasattr(writer, "drain")
    ):
        return None
    writer.send_headers()  # a no-op when prepare sent them (StreamResponse does)
    return writer, transport


class ClientSink:
    """Receives the upstream's payloads in ``data_received`` and writes them to the client as chunks."""

    __slots__ = ("_done", "_paused", "_stripper", "_transport", "_upstream", "error")

    def __init__(self, transport: asyncio.Transport, stripper: UsageStripper, upstream: UpstreamResponse) -> None:
        self.error: BaseException | None = None  # the client's side broke; re-raised in the handler
        self._transport = transport
        self._stripper = stripper
        self._upstream = upstream
        self._paused = False
        self._done: asyncio.Future[None] | None = None

    def append(self, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            self.send(self._stripper.feed(data))
        except Exception as exc:  # a broken client transport: stop and let the handler decide
            self.error = exc
            self._wake()

    def send(self, out: bytes) -> None:
        """Write ``out`` to the client as one chunk (nothing for no bytes), pausing the upstream on backpressure."""
        if not out:
            return
        transport = self._transport
        if transport.is_closing():
            raise ConnectionResetError("the client's connection is closing")
        transport.write(b"%x\r\n%b\r\n" % (len(out), out))
        if not self._paused and transport.get_write_buffer_size() > PAUSE_BYTES:
            self._paused = True
            self._upstream.pause_reading()
            self._wake()

    def _wake(self) -> None:
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)

    async def run(self, writer: Any) -> None:
        """Until the upstream's body ends: raises the upstream's error (``OSError``) or the client side's.

        One future per wait, resolved by whichever comes first (the upstream's end through ``on_end``, a pause
        or a broken client through ``_wake``): a task for ``wait_end`` and ``asyncio.wait`` on both cost about
        3 % of the proxy's CPU at 256 streams (py-spy).
        """
        upstream = self._upstream
        loop = asyncio.get_running_loop()
        upstream.on_end(self._wake)
        try:
            while True:
                if upstream.ended:
                    upstream.raise_error()
                    if self.error is None:
                        return
                if self.error is not None:
                    raise self.error
                if self._paused:
                    try:
                        await writer.drain()  # aiohttp waits for the client transport's resume_writing
                    except Exception as exc:
                        self.error = exc  # the client's side broke, not the upstream
                        raise
                    self._paused = False
                    upstream.resume_reading()
                    continue
                self._done = loop.create_future()
                try:
                    await self._done
                finally:
                    self._done = None
        finally:
            upstream.on_end(None)
