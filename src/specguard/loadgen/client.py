"""One streamed request to an OpenAI-compatible endpoint, timed read by read.

Timing is taken when bytes reach the client, once per network read, before
any JSON is parsed: events that arrive in one read arrive together. The
read is stamped inside the event loop's ``data_received`` callback, where
aiohttp feeds the body to the response's buffer (``ArrivalStampedBuffer``),
not when the reading task next runs: when one engine step answers a whole
batch, 200 streams become readable at once and the last task to resume
runs 2 to 5 ms after its bytes arrived (measured on 2 vCPUs, 200 streams),
which is the event loop's queue, not the server's latency.
 The
request asks for the server's running token counts
(``stream_options.continuous_usage_stats``), which ``sse`` turns into tokens
per chunk.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp

from specguard.loadgen.prompts import PromptItem
from specguard.loadgen.stream_result import StreamResult as StreamResult  # re-exported: its users import it from here
from specguard.results.models import SamplingOverrides

FLUSH_PIECES = 64


class ArrivalStampedBuffer(collections.deque[bytes]):
    """A ``StreamReader._buffer`` that notes each piece's arrival time as aiohttp appends it.

    aiohttp's ``StreamReader.feed_data`` appends every body piece to its
    ``_buffer`` deque from within the protocol's ``data_received``; this deque
    records ``(seconds after send, bytes)`` into ``res.pieces`` at that
    moment. ``tests/unit/loadgen/test_client_stamps.py`` fails if an aiohttp upgrade
    stops calling ``append``.
    """

    __slots__ = ("res", "sent_at")

    def __init__(self, existing: Iterable[bytes], res: StreamResult, sent_at: float) -> None:
        super().__init__()
        self.res = res
        self.sent_at = sent_at
        for data in existing:
            self.append(data)

    def append(self, data: bytes) -> None:
        self.res.pieces.append((time.monotonic() - self.sent_at, data))
        super().append(data)


def stamp_arrivals(content: aiohttp.StreamReader, res: StreamResult, sent_at: float) -> bool:
    """Make ``content`` stamp arrivals into ``res``; False (reads stamped by the reader) if aiohttp changed."""
    buffer = getattr(content, "_buffer", None)
    if type(buffer) is not collections.deque:
        return False
    content._buffer = ArrivalStampedBuffer(buffer, res, sent_at)
    return True


def build_payload(
    api: str,
    model: str,
    item: PromptItem,
    sampling: SamplingOverrides,
    default_max_tokens: int,
    return_token_ids: bool = False,
) -> dict[str, Any]:
    """The JSON body: per-item sampling, overridden by the run's, and streaming usage requested.

    ``return_token_ids`` asks vLLM (0.10.2 and later) for each chunk's token ids, for comparing outputs; it is
    sent only then, because a strict OpenAI-compatible server may refuse a field it does not know.
    """
    body: dict[str, Any] = {"model": model, "stream": True}
    if api == "chat":
        if item.messages is not None:
            body["messages"] = [m.model_dump() for m in item.messages]
        else:
            body["messages"] = [{"role": "user", "content": item.prompt}]
    else:
        body["prompt"] = item.as_text()
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    max_tokens = sampling.max_tokens or item.max_tokens or default_max_tokens
    body["max_tokens"] = max_tokens
    for key in ("temperature", "top_p", "ignore_eos"):
        value = getattr(sampling, key)
        if value is None:
            value = getattr(item, key)
        if value is not None:
            body[key] = value
    if item.stop is not None:
        body["stop"] = item.stop
    if return_token_ids:
        body["return_token_ids"] = True
    return body


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    api: str,
    body: dict[str, Any],
    headers: dict[str, str],
    timeout_s: float,
    sent_at: float,
    res: StreamResult | None = None,
    on_pieces: Callable[[list[tuple[float, bytes]]], None] | None = None,
) -> StreamResult:
    """POST ``body`` and read the SSE stream to its end, filling ``res`` as bytes arrive.

    Only arrival time and bytes are kept here; parsing happens elsewhere
    (``sse.SSEParser``, in the record writer), so that a busy moment (many
    streams receiving at once, as when one engine step answers a whole
    batch) delays no other stream's timestamps. Every ``FLUSH_PIECES`` reads
    go to ``on_pieces`` so a long stream can be parsed while it runs.
    Never raises for server or network faults; on cancellation ``res`` keeps
    what arrived and says the request was interrupted.
    """
    res = res if res is not None else StreamResult()
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url, json=body, headers=headers) as resp:
                res.http_status = resp.status
                if resp.status != 200:
                    text = (await resp.text(errors="replace"))[:500]
                    res.error = f"HTTP {resp.status}: {text}"
                    return res
                stamped = stamp_arrivals(resp.content, res, sent_at)
                async for data in resp.content.iter_any():
                    if not stamped:
                        res.pieces.append((time.monotonic() - sent_at, data))
                    if on_pieces is not None and len(res.pieces) >= FLUSH_PIECES:
                        on_pieces(res.pieces)
                        res.pieces = []
                res.stream_end = time.monotonic() - sent_at
    except TimeoutError:
        res.error = f"timed out after {timeout_s:g} s"
    except asyncio.CancelledError:
        res.error = "interrupted before the response finished"
        raise
    except (aiohttp.ClientError, OSError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return res
