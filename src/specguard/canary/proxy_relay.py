"""The proxy's fast relay: each upstream read is forwarded to the client inside the upstream's ``data_received``.

The plain relay (``await upstream.content.readany()`` then ``await response.write(out)``) wakes the handler
task twice per chunk and goes through aiohttp's StreamReader and StreamWriter each time: about 50 us per
chunk of the proxy's CPU at 256 streams (bench/proxy_overhead.py, 2-core dev VM), which saturated its share
of the cores and queued every stream behind the others. Here the ``StreamReader._buffer`` deque is replaced
(as ``loadgen.client.ArrivalStampedBuffer`` does to stamp reads): ``append``, called by ``feed_data`` from the
upstream protocol's ``data_received``, stamps the read, runs the incremental ``UsageStripper`` and writes the
result to the client's transport as one HTTP/1.1 chunk. The handler only waits for the end of the stream.

Nothing is kept in the reader: ``append`` takes the read back out of the reader's byte count and chunk
splits, so the reader's own flow control never pauses the upstream. Backpressure comes from the CLIENT:
when the client transport's write buffer passes ``PAUSE_BYTES`` the upstream's reading is paused, and the
handler resumes it once aiohttp's protocol says the client drained (``StreamWriter.drain``).

``install`` returns None (the caller keeps the plain loop) when aiohttp's internals are not as expected;
``tests/unit/canary/test_proxy_relay.py`` fails if an aiohttp upgrade breaks the fast path.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import aiohttp
from aiohttp import web

from specguard.canary.usage_strip import UsageStripper
from specguard.loadgen.client import StreamResult

__all__ = ["PAUSE_BYTES", "FastRelay", "install"]

# The client side's write buffer above which the upstream stops being read: aiohttp's own StreamWriter
# drains above 64 KiB (http_writer.LIMIT); a stream of SSE chunks never gets near it unless the client stalls.
PAUSE_BYTES = 64 * 1024


class FastRelay(collections.deque[bytes]):
    """The upstream reader's ``_buffer``: stamps each read into ``res.pieces`` and forwards it at once."""

    __slots__ = ("_done", "_paused", "_reader", "_stripper", "_transport", "error", "res", "sent_at")

    def __init__(
        self,
        reader: aiohttp.StreamReader,
        transport: asyncio.Transport,
        stripper: UsageStripper,
        res: StreamResult,
        sent_at: float,
    ) -> None:
        super().__init__()
        self.res = res
        self.sent_at = sent_at
        self.error: BaseException | None = None  # raised by the sink; re-raised in the handler
        self._reader: Any = reader
        self._transport = transport
        self._stripper = stripper
        self._paused = False
        self._done: asyncio.Future[None] | None = None

    def append(self, data: bytes) -> None:
        self.res.pieces.append((time.monotonic() - self.sent_at, data))
        reader = self._reader
        # feed_data counted these bytes before appending and pauses the upstream above its high-water mark;
        # nobody reads this reader, so take them (and the chunk split the parser adds) back out.
        reader._size -= len(data)
        splits = reader._http_chunk_splits
        if splits:
            splits.clear()
        if self.error is not None:
            return
        try:
            self.send(self._stripper.feed(data))
        except Exception as exc:  # a broken client transport: stop and let the handler decide
            self.fail(exc)

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
            self._reader._protocol.pause_reading()
            self._wake()

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)

    async def run(self, writer: Any) -> None:
        """Until the upstream's end: returns at EOF, raises the upstream's error (as ``readany`` would) or the sink's."""
        reader = self._reader
        loop = asyncio.get_running_loop()
        while True:
            if self.error is not None:
                raise self.error
            exc = reader.exception()
            if exc is not None:
                raise exc
            if reader.is_eof():
                return
            if self._paused:
                try:
                    await writer.drain()  # aiohttp waits for the client transport's resume_writing
                except (aiohttp.ClientError, OSError) as exc:
                    self.error = exc  # the client's side broke, not the upstream
                    raise
                self._paused = False
                reader._protocol.resume_reading()
                continue
            # wait_eof ends at EOF and raises what set_exception gave (a broken upstream); _done, the sink's news.
            self._done = loop.create_future()
            eof = asyncio.ensure_future(reader.wait_eof())
            try:
                await asyncio.wait((self._done, eof), return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not eof.done():
                    eof.cancel()
                self._done = None
            if eof.done() and not eof.cancelled():
                eof.result()  # raises the upstream's error


def install(
    reader: aiohttp.StreamReader, response: web.StreamResponse, stripper: UsageStripper, res: StreamResult, sent_at: float
) -> tuple[FastRelay, Any, bytes] | None:
    """Put a ``FastRelay`` in ``reader`` (after ``response.prepare``); with it the writer and the reads still buffered.

    None when aiohttp's internals differ from what the relay relies on, or the response is not plainly
    chunked (a Content-Length, compression): then nothing was changed and the plain loop relays.
    """
    writer: Any = getattr(response, "_payload_writer", None)
    buffer = getattr(reader, "_buffer", None)
    transport: Any = getattr(writer, "transport", None)
    needed = ("_size", "_http_chunk_splits", "_protocol", "read_nowait", "wait_eof", "on_eof", "exception", "is_eof")
    if (
        writer is None
        or not isinstance(buffer, collections.deque)
        or not all(hasattr(reader, name) for name in needed)
        or not all(hasattr(transport, name) for name in ("write", "is_closing", "get_write_buffer_size"))
        or getattr(writer, "chunked", False) is not True
        or getattr(writer, "_compress", True) is not None
        or getattr(writer, "length", True) is not None
        or getattr(writer, "_on_chunk_sent", True) is not None
        or not hasattr(writer, "send_headers")
        or reader.exception() is not None
    ):
        return None
    writer.send_headers()  # a no-op when prepare sent them (StreamResponse does)
    pending = reader.read_nowait(-1) if buffer else b""  # already stamped on arrival
    relay = FastRelay(reader, transport, stripper, res, sent_at)
    reader._buffer = relay
    return relay, writer, pending
