"""One streamed request to an OpenAI-compatible endpoint, timed chunk by chunk.

Timing is taken when bytes reach the client, once per network read, before
any JSON is parsed: events that arrive in one read arrive together. Token
counts come from the server's running usage (``continuous_usage_stats``);
only without it does the client fall back to a local tokenizer, or failing
that to one token per chunk, and it records which source it used.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specguard.loadgen.prompts import PromptItem
from specguard.results.models import SamplingOverrides, TokenSource

TokenCounter = Callable[[str], int]


@dataclass
class StreamResult:
    """What one request produced, times in seconds after its actual send."""

    ok: bool = False
    error: str | None = None
    http_status: int | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_texts: list[str] = field(default_factory=list)
    chunk_usage: list[int | None] = field(default_factory=list)
    final_usage_prompt: int | None = None
    final_usage_completion: int | None = None
    finish_reason: str | None = None
    stream_end: float | None = None
    pieces: list[tuple[float, bytes]] = field(default_factory=list)


def build_payload(
    api: str, model: str, item: PromptItem, sampling: SamplingOverrides, default_max_tokens: int
) -> dict[str, Any]:
    """The JSON body: per-item sampling, overridden by the run's, and streaming usage requested."""
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
    return body


def _delta_text(api: str, choice: dict[str, Any]) -> str:
    if api == "chat":
        delta = choice.get("delta") or {}
        return (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")
    return choice.get("text") or ""


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    api: str,
    body: dict[str, Any],
    headers: dict[str, str],
    timeout_s: float,
    sent_at: float,
    res: StreamResult | None = None,
) -> StreamResult:
    """POST ``body`` and read the SSE stream to its end, filling ``res`` as chunks arrive.

    Never raises for server or network faults; on cancellation ``res`` keeps
    what arrived and says the request was interrupted.
    """
    res = res if res is not None else StreamResult()
    # Only arrival time and bytes are kept while the stream runs; parsing is
    # left to finish_stream(), off the event loop, so that a busy moment (many
    # streams receiving at once, as when one engine step answers a whole
    # batch) delays no other stream's timestamps.
    pieces = res.pieces
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url, json=body, headers=headers) as resp:
                res.http_status = resp.status
                if resp.status != 200:
                    text = (await resp.text(errors="replace"))[:500]
                    res.error = f"HTTP {resp.status}: {text}"
                    return res
                async for data in resp.content.iter_any():
                    pieces.append((time.monotonic() - sent_at, data))
                res.stream_end = time.monotonic() - sent_at
    except TimeoutError:
        res.error = f"timed out after {timeout_s:g} s"
    except asyncio.CancelledError:
        res.error = "interrupted before the response finished"
        raise
    except (aiohttp.ClientError, OSError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return res


def finish_stream(res: StreamResult, api: str) -> StreamResult:
    """Parse the received bytes into chunks; set ``ok`` and, for a stream cut short, ``error``."""
    done = _parse_pieces(res.pieces, api, res)
    if res.error is None and not done:
        res.error = "stream ended before [DONE]"
    res.ok = res.error is None
    return res


def _parse_pieces(pieces: list[tuple[float, bytes]], api: str, res: StreamResult) -> bool:
    """Split the received bytes into SSE events, each stamped with the arrival of the read that completed it."""
    buf = b""
    done = False
    for now, data in pieces:
        buf += data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            event, buf = buf[:cut], buf[cut + 2 :]
            if _handle_event(event, api, now, res):
                done = True
    return done


def _handle_event(event: bytes, api: str, now: float, res: StreamResult) -> bool:
    """Apply one SSE event; True when it is the terminating [DONE]."""
    for line in event.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return True
        try:
            obj = json.loads(payload)
        except ValueError:
            if res.error is None:
                res.error = f"unparsable stream event: {payload[:200]!r}"
            return False
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            if res.error is None:
                res.error = f"server error in stream: {err.get('message', err) if isinstance(err, dict) else err}"
            continue
        usage = obj.get("usage")
        completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
        choices = obj.get("choices") or []
        if not choices:
            if isinstance(usage, dict):
                res.final_usage_prompt = usage.get("prompt_tokens")
                res.final_usage_completion = completion
            continue
        choice = choices[0]
        if choice.get("finish_reason"):
            res.finish_reason = choice["finish_reason"]
        if isinstance(usage, dict):
            res.final_usage_prompt = usage.get("prompt_tokens", res.final_usage_prompt)
            res.final_usage_completion = completion
        res.chunk_times.append(now)
        res.chunk_texts.append(_delta_text(api, choice))
        res.chunk_usage.append(completion)
    return False


def chunk_token_counts(
    res: StreamResult, tokenizer: TokenCounter | None
) -> tuple[list[float], list[int], TokenSource, int | None]:
    """Token-bearing chunk times, their token counts, the count's source, and total output tokens.

    With server usage on every chunk, a chunk's tokens are the rise of the
    server's running completion_tokens; chunks that carry none (role headers,
    a finish-reason-only chunk) are dropped.
    """
    times: list[float] = []
    tokens: list[int] = []
    if res.chunk_usage and all(u is not None for u in res.chunk_usage):
        prev = 0
        for t, u in zip(res.chunk_times, res.chunk_usage):
            assert u is not None
            if u > prev:
                times.append(t)
                tokens.append(u - prev)
                prev = u
        return times, tokens, "server_usage", res.final_usage_completion or prev
    source: TokenSource = "local_tokenizer" if tokenizer is not None else "chunk_count"
    for t, text in zip(res.chunk_times, res.chunk_texts):
        if not text:
            continue
        n = tokenizer(text) if tokenizer is not None else 1
        if n > 0:
            times.append(t)
            tokens.append(n)
    total = res.final_usage_completion if res.final_usage_completion is not None else sum(tokens)
    return times, tokens, source, total
