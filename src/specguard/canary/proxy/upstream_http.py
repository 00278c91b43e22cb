"""The proxy's HTTP/1.1 client for its upstreams: one asyncio protocol per connection, kept alive in a pool.

Why not aiohttp's client: at 256 streams of a chunk every 20 ms, specguard's proxy on aiohttp's client and
its ``StreamReader`` spent 66-92 us of CPU per streamed chunk and about 0.5 ms per request; on a 2-core
machine shared with the load generator and the backend that saturated its share and queued every stream
(+110 ms TTFT and +49 ms chunk delivery at p99, against HAProxy's +8 and +6, bench/proxy_overhead.py). A
bare byte relay written as asyncio protocols on uvloop cost 22 us per chunk there, as HAProxy did. This
client keeps to that shape: ``data_received`` decodes the chunked framing in place, stamps the read into
``StreamResult.pieces`` (the time since the request was sent and the payload, as bench stamps its reads)
and hands the payload to a sink: a buffer until the relay takes over, then straight to the client's
transport (``UpstreamResponse.forward``). Nothing waits on a task per chunk.

What it does not do, because the proxy never needs it: proxies, redirects, cookies, decompression (bytes
pass as sent), request bodies in chunks (the proxy sends the bytes it read). ``https://`` servers are
reached with the system's default TLS context (certificates verified).

Keep-alive: a connection whose response ended cleanly (its framing complete, no ``Connection: close``)
goes back to its pool; one idle for ``IDLE_S`` or more is closed instead of reused, shorter than uvicorn's
default keep-alive of 5 s (vLLM's API server), so the proxy never writes a request onto a connection the
server is closing. A response cut off mid-body closes its connection, so the server sees the close.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit

from multidict import CIMultiDict

from specguard.loadgen.client import StreamResult

__all__ = ["IDLE_S", "UpstreamClient", "UpstreamClosed", "UpstreamProtocolError", "UpstreamResponse", "request_head"]

IDLE_S = 4.0  # under uvicorn's --timeout-keep-alive default of 5 s
_MAX_HEAD = 64 * 1024  # a response head larger than this is not a vLLM server's
_Key = tuple[str, str, int]  # scheme, host, port


class UpstreamClosed(ConnectionResetError):
    """The upstream closed the connection before the response was complete."""


class UpstreamProtocolError(OSError):
    """The upstream's bytes are not HTTP/1.1 as the proxy reads it."""


def request_head(method: str, path: str, host: str, headers: CIMultiDict[str], body_len: int) -> bytes:
    """The request line and headers: ``Host`` the upstream's, ``Content-Length`` the body's (none for an empty GET/HEAD)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body_len or method not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {body_len}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@dataclass
class UpstreamResponse:
    """A response's head, and its body as it arrives: read it (``read``) or hand it on (``forward``)."""

    status: int
    reason: str
    headers: CIMultiDict[str]
    content_length: int | None
    _conn: _Connection = field(repr=False)
    _released: bool = field(default=False, repr=False)

    @property
    def chunked(self) -> bool:
        return self._conn.chunked

    async def read(self) -> bytes:
        """The next payload bytes as they arrived (every read's since the last call); b"" at the end."""
        return await self._conn.read()

    async def read_all(self) -> bytes:
        parts = []
        while data := await self.read():
            parts.append(data)
        return b"".join(parts)

    def forward(self, sink: Callable[[bytes], None]) -> bytes:
        """From now on give each read's payload to ``sink`` inside ``data_received``; returns what was buffered."""
        return self._conn.forward(sink)

    @property
    def ended(self) -> bool:
        """The body is complete, or the response failed (``raise_error`` raises why)."""
        return self._conn.ended

    def raise_error(self) -> None:
        """Raises what cut the response off (``OSError``); nothing when it has not failed."""
        self._conn.raise_error()

    def on_end(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (inside ``data_received``) when the response ends or fails; None to stop."""
        self._conn.on_end(callback)

    def pause_reading(self) -> None:
        self._conn.pause()

    def resume_reading(self) -> None:
        self._conn.resume()

    def close(self) -> None:
        """Done with it: a complete body returns the connection to its pool, anything else closes it. Idempotent."""
        if not self._released:
            self._released = True
            self._conn.release()


class _Connection(asyncio.Protocol):
    """One upstream connection; one request at a time."""

    def __init__(self, client: UpstreamClient, key: _Key) -> None:
        # Kept: asyncio.get_running_loop() makes a getpid() system call on every call in CPython 3.11, and the
        # request path called it eight times per request (1.8 % of the proxy's samples, py-spy, 256 streams).
        self._loop = asyncio.get_running_loop()
        self._client = client
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.res: StreamResult | None = None
        self.sent_at = 0.0
        self.no_body = False
        self._head = bytearray()
        self._in_body = False
        self.chunked = False
        self._left: int | None = None  # bytes left: of the content, or of the current chunk
        self._size_line = b""  # a chunk-size line split across reads
        self._crlf = 0  # bytes of the CRLF after a chunk's data still to skip
        self._trailer = False  # after the last chunk: the trailer section, up to its empty line
        self._trailer_buf = b""
        self.complete = False
        self._close_after = False
        self._head_future: asyncio.Future[UpstreamResponse] | None = None
        self._buffer: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        self._sink: Callable[[bytes], None] | None = None
        self._error: BaseException | None = None
        self._on_end: Callable[[], None] | None = None
        self._deadline: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport is one without subclassing it

    def data_received(self, data: bytes) -> None:
        if self.res is None:  # bytes while idle: the connection cannot be trusted any more
            self.lost = True
            if self.transport is not None:
                self.transport.close()
            return
        if not self._in_body:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > _MAX_HEAD:
                    self._fail(UpstreamProtocolError(f"response head over {_MAX_HEAD} bytes"))
                return
            head, rest = bytes(self._head[:end]), bytes(self._head[end + 4 :])
            self._head = bytearray()
            try:
                response = self._parse_head(head)
            except UpstreamProtocolError as exc:
                self._fail(exc)
                return
            if response is None:  # a 1xx: the real head follows
                if rest:
                    self.data_received(rest)
                return
            self._in_body = True
            if self._head_future is not None and not self._head_future.done():
                self._head_future.set_result(response)
            if self.no_body:
                self._end()
                return
            data = rest
            if not data:
                return
        payload = self._decode(data) if self.chunked else self._content(data)
        if payload is None:
            return
        if payload:
            assert self.res is not None
            if self._deadline is not None:
                self._disarm()
            self.res.pieces.append((time.monotonic() - self.sent_at, payload))
            sink = self._sink
            if sink is not None:
                sink(payload)
            else:
                self._buffer.append(payload)
                self._wake()
        if self.complete:
            self._end()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._client.forget(self)
        if self.res is not None and not self.complete:
            if self._in_body and self._left is None and not self.chunked:
                self._end()  # a body delimited by the close (neither chunked nor with a length): complete
                return
            what = "in the body" if self._in_body else "before answering"
            self._fail(UpstreamClosed(f"the server closed the connection {what}" + (f": {exc}" if exc else "")))

    # -- the head and the framing -------------------------------------------------------------------------

    def _parse_head(self, head: bytes) -> UpstreamResponse | None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise UpstreamProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200 and status != 101:
            return None
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise UpstreamProtocolError(f"malformed header line: {line[:80]!r}")
            headers.add(name, value.strip())
        connection = headers.get("Connection", "").lower()
        self._close_after = "close" in connection or parts[0] == "HTTP/1.0"
        length: int | None = None
        if self.no_body or status in (204, 304):
            self.no_body = True
        elif "chunked" in headers.get("Transfer-Encoding", "").lower():
            self.chunked = True
        elif "Content-Length" in headers:
            value = headers["Content-Length"]
            if not value.isdigit():
                raise UpstreamProtocolError(f"Content-Length is not a number: {value[:40]!r}")
            length = self._left = int(value)
            if length == 0:
                self.no_body = True
        else:
            self._close_after = True  # delimited by the connection's close
        return UpstreamResponse(status, parts[2] if len(parts) > 2 else "", headers, length, self)

    def _content(self, data: bytes) -> bytes:
        if self._left is None:
            return data
        take = data[: self._left]
        self._left -= len(take)
        if self._left == 0:
            self.complete = True
        return take

    def _decode(self, data: bytes) -> bytes | None:
        """The payload of this read's chunks; sets ``complete`` at the end of the trailer. None on a framing error."""
        out: list[bytes] = []
        pos = 0
        if not (self._left or self._crlf or self._trailer or self._size_line):
            # The common read: whole chunks (vLLM writes one SSE event per chunk; one arrives alone, or several
            # together when the proxy fell behind). The state machine below took three turns per chunk and was
            # the proxy's largest cost in Python at 256 streams (5.4 % of its samples, py-spy).
            pos = _whole_chunks(data, out)
            if pos == len(data):
                return out[0] if len(out) == 1 else b"".join(out)
        elif self._size_line:  # the read before ended inside a chunk-size line (even between its CR and LF)
            data, self._size_line = self._size_line + data, b""
        n = len(data)
        while pos < n:
            if self._trailer:
                buf = self._trailer_buf + data[pos:]
                if buf.startswith(b"\r\n"):
                    self.complete = True
                    break
                end = buf.find(b"\r\n\r\n")
                if end >= 0:
                    self.complete = True
                    break
                self._trailer_buf = buf[-3:]
                break
            if self._crlf:
                skip = min(self._crlf, n - pos)
                pos += skip
                self._crlf -= skip
                continue
            left = self._left
            if left:
                take = data[pos : pos + left]
                out.append(take)
                pos += len(take)
                self._left = left - len(take)
                if self._left == 0:
                    self._crlf = 2
                continue
            end = data.find(b"\r\n", pos)
            if end < 0:
                self._size_line += data[pos:]
                if len(self._size_line) > 1024:
                    self._fail(UpstreamProtocolError("a chunk-size line over 1 KiB"))
                    return None
                break
            line = data[pos:end]
            pos = end + 2
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                size = -1
            if size < 0:
                self._fail(UpstreamProtocolError(f"not a chunk size: {line[:40]!r}"))
                return None
            if size == 0:
                self._trailer = True
                self._trailer_buf = b""
            else:
                self._left = size
        return out[0] if len(out) == 1 else b"".join(out)

    # -- the reader's side ----------------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _end(self) -> None:
        self.complete = True
        self._disarm()
        self._wake()
        if self._on_end is not None:
            self._on_end()

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._disarm()
        if self._head_future is not None and not self._head_future.done():
            self._head_future.set_exception(exc)
        self._wake()
        if self._on_end is not None:
            self._on_end()
        self._close_after = True
        if self.transport is not None:
            self.transport.close()

    async def read(self) -> bytes:
        while not self._buffer:
            if self._error is not None:
                raise self._error
            if self.complete:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = self._buffer[0] if len(self._buffer) == 1 else b"".join(self._buffer)
        self._buffer.clear()
        return data

    def forward(self, sink: Callable[[bytes], None]) -> bytes:
        self._sink = sink
        data = b"".join(self._buffer)
        self._buffer.clear()
        return data

    @property
    def ended(self) -> bool:
        return self.complete or self._error is not None

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def on_end(self, callback: Callable[[], None] | None) -> None:
        self._on_end = callback

    def _first_byte_late(self, timeout_s: float) -> None:
        self._deadline = None
        self._fail(TimeoutError(f"no response within {timeout_s:g} s"))

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def pause(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def release(self) -> None:
        reusable = self.complete and self._error is None and not self._close_after and not self.lost
        self._disarm()
        self._reset()
        if reusable:
            self._client.give_back(self)
        elif self.transport is not None:
            self.transport.close()

    def begin(
        self, res: StreamResult, sent_at: float, no_body: bool, first_byte_timeout_s: float | None, deadline: float | None
    ) -> asyncio.Future[UpstreamResponse]:
        """A request is being sent; its first byte is due by ``deadline`` (``time.monotonic()``; None: no limit)."""
        self.res = res
        self.sent_at = sent_at
        self.no_body = no_body
        if first_byte_timeout_s is not None and deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            self._deadline = self._loop.call_later(left, self._first_byte_late, first_byte_timeout_s)
        self._head_future = self._loop.create_future()
        return self._head_future


def _whole_chunks(data: bytes, out: list[bytes]) -> int:
    """The payloads of the whole chunks ``data`` starts with, appended to ``out``; returns where they end.

    Stops at anything else (a part of a chunk, the last chunk, an extension, a chunk not followed by CRLF): the
    general path reads on from there, as it would have read the whole.
    """
    pos, n = 0, len(data)
    find = data.find
    while pos < n:
        end = find(b"\r\n", pos, pos + 18)
        if end <= pos:
            break
        try:
            size = int(data[pos:end], 16)
        except ValueError:  # a chunk extension, or not a size: the general path says which
            break
        stop = end + 2 + size
        if size <= 0 or stop + 2 > n or data[stop : stop + 2] != b"\r\n":
            break
        out.append(data[end + 2 : stop])
        pos = stop + 2
    return pos


class UpstreamClient:
    """Connections to the pools' servers, by host and port, kept alive between requests (no limit on their number:
    the servers' own queues are the limit, as with aiohttp's ``TCPConnector(limit=0)`` before)."""

    def __init__(self) -> None:
        self._idle: dict[_Key, collections.deque[_Connection]] = collections.defaultdict(collections.deque)
        self._all: set[_Connection] = set()
        self._tls_context: ssl.SSLContext | None = None

    async def request(
        self,
        method: str,
        url: str,
        headers: CIMultiDict[str],
        body: bytes,
        res: StreamResult,
        sent_at: float,
        first_byte_timeout_s: float | None = None,
    ) -> UpstreamResponse:
        """Send the request; returns the response head once it arrived.

        ``res.pieces`` gets each read's payload, stamped in seconds since ``sent_at`` (the caller's monotonic time
        origin, taken before the connection, as bench takes it). Raises ``OSError`` (refused, reset,
        ``UpstreamClosed``, ``UpstreamProtocolError``); cancellation closes the connection.

        ``first_byte_timeout_s``: from now until the body's first byte (or the end of a response without one),
        the connection included; past it the head or the next read raises ``TimeoutError`` and the connection
        closes. A timer of the connection's own, not ``asyncio.timeout`` around the caller's awaits: that cost
        about 3 % of the proxy's CPU at 256 streams (a Timeout object, the current task and two loop lookups per
        request, py-spy).
        """
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or parts.hostname is None:
            raise UpstreamProtocolError(f"an upstream is an http(s):// URL (got {url!r})")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        key = (parts.scheme, parts.hostname, port)
        deadline = None if first_byte_timeout_s is None else time.monotonic() + first_byte_timeout_s
        conn = self._take(key)
        if conn is None:
            loop = asyncio.get_running_loop()
            context = self._tls() if tls else None
            async with asyncio.timeout(first_byte_timeout_s):
                _, conn = await loop.create_connection(lambda: _Connection(self, key), parts.hostname, port, ssl=context)
            self._all.add(conn)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        head_future = conn.begin(res, sent_at, method == "HEAD", first_byte_timeout_s, deadline)
        assert conn.transport is not None
        conn.transport.write(request_head(method, path or "/", parts.netloc, headers, len(body)) + body)
        try:
            return await head_future
        except BaseException:
            conn.release()  # not complete: closes
            raise

    def _tls(self) -> ssl.SSLContext:
        if self._tls_context is None:
            self._tls_context = ssl.create_default_context()
        return self._tls_context

    def _take(self, key: _Key) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be timing out
            if conn.lost or conn.transport is None or conn.transport.is_closing():
                continue
            if now - conn.idle_since >= IDLE_S:
                conn.transport.close()
                continue
            return conn
        return None

    def give_back(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle[conn.key].append(conn)

    def forget(self, conn: _Connection) -> None:
        self._all.discard(conn)

    def idle_connections(self) -> int:
        return sum(len(q) for q in self._idle.values())

    async def close(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)
