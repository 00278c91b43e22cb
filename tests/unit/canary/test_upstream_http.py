"""The proxy's HTTP/1.1 client: chunked framing decoded whatever the read boundaries, bodies by length and by
close, 1xx heads skipped, connections kept alive and reused (and not once idle too long), a cut-off body an
error, a malformed head an error; against real sockets (an asyncio server of the test's own) where it can."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import uvloop
from multidict import CIMultiDict

from specguard.canary.proxy import upstream_http
from specguard.canary.proxy.upstream_http import UpstreamClient, UpstreamClosed, UpstreamProtocolError, request_head
from specguard.loadgen.client import StreamResult

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP server answering with the bytes the test writes; yields its URL and the connections it accepted."""
    accepted: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", accepted
    finally:
        server.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)
    return head + await reader.readexactly(length)


async def fetch_written_in_reads(pieces: list[bytes], gap_s: float) -> tuple[int, bytes, StreamResult]:
    """What a client fetches from a server that writes ``pieces`` one by one, ``gap_s`` apart (separate reads)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(gap_s)
        await reader.read()

    async with raw_server(handler) as (url, _):
        client = UpstreamClient()
        try:
            return await fetch(client, url)
        finally:
            await client.close()


def chunked(payloads: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


async def fetch(client: UpstreamClient, url: str) -> tuple[int, bytes, StreamResult]:
    res = StreamResult()
    resp = await client.request("POST", url + "/v1/completions", CIMultiDict(), b"{}", res, asyncio.get_running_loop().time())
    try:
        return resp.status, await resp.read_all(), res
    finally:
        resp.close()


@pytest.mark.parametrize("seed", range(5))
async def test_chunked_bodies_decode_the_same_whatever_the_read_boundaries(seed: int) -> None:
    await _chunked_bodies(seed)


def test_on_uvloop_as_canary_run_serves_it() -> None:
    # uvloop's transports are not asyncio.Transport subclasses, and its reads split differently.
    uvloop.run(_chunked_bodies(7))


async def _chunked_bodies(seed: int) -> None:
    rng = random.Random(seed)
    payloads = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) for _ in range(40)]
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(payloads)
    cuts = sorted(rng.sample(range(1, len(wire)), 60))
    status, body, res = await fetch_written_in_reads([wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)])], 0.001)
    assert status == 200 and body == b"".join(payloads)
    assert b"".join(d for _, d in res.pieces) == body and len(res.pieces) > 1
    assert all(b >= a for (a, _), (b, _) in zip(res.pieces, res.pieces[1:])), "stamps in arrival order"


async def test_one_chunk_per_read_and_chunk_extensions_decode_alike() -> None:
    payloads = [b"data: %d\n\n" % i for i in range(20)]
    pieces = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
    pieces += [b"%x\r\n%b\r\n" % (len(p), p) for p in payloads[:10]]  # the fast path: one whole chunk a read
    pieces += [b"%x;name=value\r\n%b\r\n" % (len(p), p) for p in payloads[10:]]  # with an extension
    pieces.append(b"0\r\n\r\n")
    status, body, res = await fetch_written_in_reads(pieces, 0.002)
    assert status == 200 and body == b"".join(payloads)
    assert [d for _, d in res.pieces][:10] == payloads[:10], "one piece per read, as it arrived"


async def test_keep_alive_reuses_a_connection_and_not_one_idle_too_long(monkeypatch: pytest.MonkeyPatch) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async with raw_server(handler) as (url, accepted):
        client = UpstreamClient()
        for _ in range(3):
            assert (await fetch(client, url))[:2] == (200, b"ok")
        assert len(accepted) == 1 and client.idle_connections() == 1
        monkeypatch.setattr(upstream_http, "IDLE_S", 0.0)  # every idle connection is now too old to trust
        assert (await fetch(client, url))[:2] == (200, b"ok")
        assert len(accepted) == 2
        await client.close()


async def test_connection_close_and_a_body_delimited_by_close() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        await writer.drain()

    async with raw_server(handler) as (url, accepted):
        client = UpstreamClient()
        assert (await fetch(client, url))[:2] == (200, b"until the end")
        assert client.idle_connections() == 0
        assert (await fetch(client, url))[:2] == (200, b"until the end")
        assert len(accepted) == 2
        await client.close()


async def test_a_body_cut_off_mid_chunk_raises_upstream_closed_and_keeps_what_arrived() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10\r\npart")
        await writer.drain()

    async with raw_server(handler) as (url, _):
        client = UpstreamClient()
        res = StreamResult()
        resp = await client.request("POST", url + "/x", CIMultiDict(), b"{}", res, 0.0)
        got = b""
        with pytest.raises(UpstreamClosed, match="in the body"):
            while data := await resp.read():
                got += data
        resp.close()
        await client.close()
    assert got == b"hellopart" and b"".join(d for _, d in res.pieces) == b"hellopart"


async def test_several_whole_chunks_in_one_read_and_a_chunk_split_across_reads_decode_as_sent() -> None:
    """A proxy that falls behind reads several chunks at once: each read's payload is its chunks' payloads, in
    order, whether the read ends on a chunk's end or inside one (inside its data, its CRLF or its size line)."""
    payloads = [b"data: %d\n\n" % i for i in range(12)]
    wire = chunked(payloads)
    first = wire.index(b"data: 3") + 4  # chunks 0-2 whole, then the start of chunk 3's data
    second = wire.index(b"data: 7") + len(payloads[7]) + 1  # between chunk 7's CR and LF
    third = wire.index(b"\r\n", wire.index(b"data: 10")) + 3  # chunk 10 whole and "a" of chunk 11's size
    reads = [wire[:first], wire[first:second], wire[second:third], wire[third:]]
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    status, body, res = await fetch_written_in_reads([head, *reads], 0.02)
    assert status == 200 and body == b"".join(payloads)
    got = [d for _, d in res.pieces]
    assert got[0] == b"".join(payloads[:3]) + payloads[3][:4], got
    assert b"".join(got) == body and len(got) == 4


@pytest.mark.parametrize(
    ("wire", "match"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n", "Content-Length is not a number"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not a chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nx\r\n", "not a chunk size"),
    ],
)
async def test_a_malformed_response_is_a_protocol_error(wire: bytes, match: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(wire)
        await writer.drain()
        await reader.read()

    async with raw_server(handler) as (url, _):
        client = UpstreamClient()
        with pytest.raises(UpstreamProtocolError, match=match):
            await fetch(client, url)
        await client.close()


async def test_a_refused_connection_is_an_os_error() -> None:
    from specguard.vllm.process import free_port

    client = UpstreamClient()
    with pytest.raises(OSError):
        await fetch(client, f"http://127.0.0.1:{free_port()}")
    await client.close()


def test_the_request_head_names_the_upstream_host_and_the_body_length() -> None:
    headers = CIMultiDict([("Authorization", "Bearer x"), ("X-Request-Id", "r1")])
    head = request_head("POST", "/v1/completions", "10.0.0.1:8000", headers, 17)
    assert head == (
        b"POST /v1/completions HTTP/1.1\r\nHost: 10.0.0.1:8000\r\nAuthorization: Bearer x\r\n"
        b"X-Request-Id: r1\r\nContent-Length: 17\r\n\r\n"
    )
    assert b"Content-Length" not in request_head("GET", "/v1/models", "h:1", CIMultiDict(), 0)


@pytest.mark.parametrize("answer", [b"", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"])
async def test_no_first_byte_within_the_timeout_is_a_timeout_and_closes_the_connection(answer: bytes) -> None:
    """No head, or a head and no body: past ``first_byte_timeout_s`` the request (or the read) raises TimeoutError
    and the server sees the connection close."""
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()
        await reader.read()  # returns at the client's close
        closed.set()

    async with raw_server(handler) as (url, _):
        client = UpstreamClient()
        res = StreamResult()
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError, match="no response within 0.2 s"):
            resp = await client.request("POST", url + "/x", CIMultiDict(), b"{}", res, 0.0, 0.2)
            await resp.read()
        waited = asyncio.get_running_loop().time() - started
        await asyncio.wait_for(closed.wait(), 5)
        await client.close()
    assert waited >= 0.2 and res.pieces == []


async def test_the_timeout_ends_at_the_first_byte_of_the_body() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"2\r\nab\r\n")
        await writer.drain()
        await asyncio.sleep(0.5)  # well past the timeout, after the first byte
        writer.write(b"2\r\ncd\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with raw_server(handler) as (url, _):
        client = UpstreamClient()
        res = StreamResult()
        resp = await client.request("POST", url + "/x", CIMultiDict(), b"{}", res, 0.0, 0.2)
        body = await resp.read_all()
        resp.close()
        await client.close()
    assert body == b"abcd"
