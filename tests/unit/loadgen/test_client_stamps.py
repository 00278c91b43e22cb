"""Arrival stamps are taken where aiohttp feeds the body, not when the reading task resumes."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from specguard.loadgen.client import ArrivalStampedBuffer, StreamResult, stamp_arrivals


class _Protocol:
    """The two calls a StreamReader makes on its protocol for flow control."""

    def pause_reading(self) -> None: ...

    def resume_reading(self, resume_parser: bool = True) -> None: ...


async def _feed_then_read() -> tuple[StreamResult, float, float, list[bytes]]:
    reader = aiohttp.StreamReader(_Protocol(), 2**16, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    res = StreamResult()
    sent_at = time.monotonic()
    assert stamp_arrivals(reader, res, sent_at), "aiohttp's StreamReader no longer keeps a deque _buffer"
    fed_at = time.monotonic() - sent_at
    reader.feed_data(b"data: 1\n\n")
    reader.feed_data(b"data: 2\n\n")
    await asyncio.sleep(0.05)  # the reader resumes well after the bytes arrived
    read_at = time.monotonic() - sent_at
    reader.feed_eof()
    got = [chunk async for chunk in reader.iter_any()]
    return res, fed_at, read_at, got


def test_feed_data_is_stamped_at_arrival_and_still_read_in_full() -> None:
    res, fed_at, read_at, got = asyncio.run(_feed_then_read())
    assert b"".join(got) == b"data: 1\n\ndata: 2\n\n"
    assert [d for _, d in res.pieces] == [b"data: 1\n\n", b"data: 2\n\n"]
    assert all(fed_at <= t < read_at for t, _ in res.pieces)


def test_data_already_buffered_is_kept_and_stamped_once() -> None:
    async def run() -> StreamResult:
        reader = aiohttp.StreamReader(_Protocol(), 2**16, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
        reader.feed_data(b"early")
        res = StreamResult()
        assert stamp_arrivals(reader, res, time.monotonic())
        assert isinstance(reader._buffer, ArrivalStampedBuffer)
        reader.feed_eof()
        assert await reader.read() == b"early"
        return res

    assert [d for _, d in asyncio.run(run()).pieces] == [b"early"]
