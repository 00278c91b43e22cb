"""Incremental parsing of an OpenAI-style SSE response into timed, token-counted chunks. Pure, no I/O.

Input is what the client saw: (arrival time, bytes) per network read. Each
event is stamped with the arrival of the read that completed it. Parsing is
incremental (``feed`` may be called with a stream's reads in batches) so the
record writer can keep up with a stream while it is still running.

Fast path: an event that is one ``data:`` line with a structural
``"completion_tokens": N`` is counted by a byte search, without a JSON parse;
a quote inside generated text is always escaped (``\\"``), so only the
structural key counts. Its raw bytes are kept so that, if the stream turns out
not to carry usage on every chunk, everything is re-read in full; so is a stream
whose output is collected (``collect_output``: vLLM's ``return_token_ids`` puts
each chunk's new token ids in ``choices[0].token_ids``), in the record writer's
process, after the stream ended, where the cost times nothing.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from specguard.results.models import TokenSource

TokenCounter = Callable[[str], int]

_NUMBER = re.compile(rb"\s*(\d+)")
_COMPLETION_KEY = b'"completion_tokens":'
_PROMPT_KEY = b'"prompt_tokens":'
_NO_CHOICES = re.compile(rb'"choices":\s*\[\s*\]')
# After the key must come '":' directly; inside a JSON string every quote is escaped, so text never matches.
_COUNTS = re.compile(rb'"completion_tokens":\s*(\d+)')


@dataclass
class ParsedStream:
    chunk_times: list[float] = field(default_factory=list)
    chunk_usage: list[int | None] = field(default_factory=list)
    chunk_texts: list[str | None] = field(default_factory=list)
    chunk_token_ids: list[list[int] | None] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    done: bool = False
    error: str | None = None


def _last_count(event: bytes, key: bytes) -> int | None:
    i = event.rfind(key)
    while i > 0 and event[i - 1] == 0x5C:  # a backslash: this key is inside a string
        i = event.rfind(key, 0, i)
    if i < 0:
        return None
    m = _NUMBER.match(event, i + len(key))
    return int(m.group(1)) if m else None


def _delta_text(api: str, choice: dict[str, Any]) -> str:
    if api == "chat":
        delta = choice.get("delta") or {}
        return (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")
    return choice.get("text") or ""


def _delta_ids(choice: dict[str, Any]) -> list[int] | None:
    ids = choice.get("token_ids")
    return [int(i) for i in ids] if isinstance(ids, list) else None


class SSEParser:
    def __init__(self, api: str, collect_output: bool = False) -> None:
        self.api = api
        self.collect_output = collect_output
        self.out = ParsedStream()
        self._buf = b""
        self._carry_cr = False
        self._raw: list[bytes | None] = []  # raw bytes of fast-path chunks, None for fully parsed ones
        self._last_fast: bytes | None = None

    def feed(self, pieces: Iterable[tuple[float, bytes]]) -> None:
        pieces = pieces if isinstance(pieces, list) else list(pieces)
        if not pieces:
            return
        stamps: Sequence[float]
        datas: Sequence[bytes]
        stamps, datas = zip(*pieces, strict=True)
        joined = b"".join(datas)
        if self._carry_cr or b"\r" in joined:
            stamps, datas = self._lf_only(pieces)
            joined = b"".join(datas)
        head = len(self._buf)
        data = self._buf + joined
        ends = [head + e for e in itertools.accumulate(map(len, datas))]
        events = data.split(b"\n\n")
        self._buf = events.pop()
        if not events:
            return
        # Where each event's terminator lies, and so which read completed it. The common case, one whole event per
        # read (vLLM's, relayed by the canary's proxy), is told without numpy: its calls on 64-element arrays cost
        # more than the search itself (the proxy's measurement went from about 390 to 265 us per 64-chunk request
        # with this and chunk_token_counts' loop, measured in-process, interleaved).
        positions = list(itertools.accumulate(map(len, events)))
        positions = [p + 2 * i for i, p in enumerate(positions, 1)]
        if positions == ends[: len(positions)]:
            times = list(stamps[: len(positions)])
        else:
            # The read whose end is the first at or past the event's terminator (numpy's searchsorted cost 1 % of
            # the proxy's CPU at 256 streams, py-spy: a few dozen events per call, where bisect is cheaper).
            times = [stamps[bisect.bisect_left(ends, p)] for p in positions]
        if not self._batch(events, times, data[: len(data) - len(self._buf)]):
            for event, now in zip(events, times):
                self._event(event, now)

    def _lf_only(self, pieces: list[tuple[float, bytes]]) -> tuple[list[float], list[bytes]]:
        """The reads with CRLF as LF, a CR that ends a read carried over to the next (it may start its LF)."""
        stamps: list[float] = []
        datas: list[bytes] = []
        for t, d in pieces:
            if self._carry_cr:
                d = b"\r" + d
                self._carry_cr = False
            if d.endswith(b"\r"):
                d, self._carry_cr = d[:-1], True
            if b"\r" in d:
                d = d.replace(b"\r\n", b"\n")
            stamps.append(t)
            datas.append(d)
        return stamps, datas

    def _batch(self, events: list[bytes], times: list[float], region: bytes) -> bool:
        """The whole batch at C speed, when every event is a one-line JSON chunk with usage (vLLM's shape)."""
        n = len(events)
        done = events[-1] == b"data: [DONE]"
        n_json = n - 1 if done else n
        if n_json == 0 or region.count(b"\n") != 2 * n or region.count(b"data: {") != n_json:
            return False
        # vLLM's events end with the usage object and then their own ("...}}"); one that does not (truncated,
        # or another server's shape) is read in full, and a truncated one is reported.
        if region.count(b"}}\n\n") != n_json:
            return False
        if b'"error"' in region:
            return False
        counts = _COUNTS.findall(region)
        if len(counts) != n_json:
            return False
        last = n_json - 1
        bare = b"[]" in region  # once: a scan of the whole batch (15 us on a 64-chunk stream)
        final = bare and _NO_CHOICES.search(events[last]) is not None
        if bare and len(_NO_CHOICES.findall(region)) != (1 if final else 0):
            return False
        usage = list(map(int, counts))
        out = self.out
        k = last if final else n_json
        out.chunk_times.extend(times[:k])
        out.chunk_usage.extend(usage[:k])
        out.chunk_texts.extend([None] * k)
        out.chunk_token_ids.extend([None] * k)
        self._raw.extend(events[:k])
        if k:
            self._last_fast = events[k - 1]
            out.completion_tokens = usage[k - 1]
        if final:
            out.completion_tokens = usage[last]
            out.prompt_tokens = _last_count(events[last], _PROMPT_KEY)
        out.done = out.done or done
        return True

    def _event(self, event: bytes, now: float) -> None:
        out = self.out
        if event == b"data: [DONE]":
            out.done = True
            return
        if event.startswith(b"data: {") and event.endswith(b"}}") and b"\n" not in event and b'"error"' not in event:
            count = _last_count(event, _COMPLETION_KEY)
            if count is not None:
                if b"[]" in event and _NO_CHOICES.search(event):
                    out.completion_tokens = count
                    out.prompt_tokens = _last_count(event, _PROMPT_KEY)
                    return
                out.chunk_times.append(now)
                out.chunk_usage.append(count)
                out.chunk_texts.append(None)
                out.chunk_token_ids.append(None)
                out.completion_tokens = count
                self._raw.append(event)
                self._last_fast = event
                return
        self._full_event(event, now)

    def _full_event(self, event: bytes, now: float, replay_index: int | None = None) -> None:
        out = self.out
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                out.done = True
                continue
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError:
                out.error = out.error or f"unparsable stream event: {payload[:200]!r}"
                continue
            if not isinstance(obj, dict):
                continue
            choices = obj.get("choices")
            if "error" in obj and not choices:
                err = obj["error"]
                out.error = out.error or f"server error in stream: {err.get('message', err) if isinstance(err, dict) else err}"
                continue
            if obj.get("object") == "error":  # the OpenAI ErrorResponse shape, bare: {"object": "error", "message": ...}
                out.error = out.error or f"server error in stream: {obj.get('message', payload[:200].decode(errors='replace'))}"
                continue
            usage = obj.get("usage")
            completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
            if isinstance(usage, dict):
                out.prompt_tokens = usage.get("prompt_tokens", out.prompt_tokens)
                out.completion_tokens = completion
            if not choices:
                continue
            choice = choices[0]
            if choice.get("finish_reason"):
                out.finish_reason = choice["finish_reason"]
            text = _delta_text(self.api, choice)
            ids = _delta_ids(choice)
            if replay_index is not None:
                out.chunk_texts[replay_index] = text
                out.chunk_token_ids[replay_index] = ids
                continue
            out.chunk_times.append(now)
            out.chunk_usage.append(completion)
            out.chunk_texts.append(text)
            out.chunk_token_ids.append(ids)
            self._raw.append(None)

    def result(self) -> ParsedStream:
        """The parsed stream; call once, after the last feed."""
        out = self.out
        if self._last_fast is not None:
            # The finish reason rides on the last content chunk: read that one in full.
            scratch = SSEParser(self.api)
            scratch._full_event(self._last_fast, 0.0)
            out.finish_reason = scratch.out.finish_reason or out.finish_reason
            if out.prompt_tokens is None:
                out.prompt_tokens = scratch.out.prompt_tokens
        if None in out.chunk_usage or self.collect_output:
            for i, raw in enumerate(self._raw):
                if raw is not None:
                    self._full_event(raw, 0.0, replay_index=i)
        return out


def parse_stream(pieces: Iterable[tuple[float, bytes]], api: str, collect_output: bool = False) -> ParsedStream:
    parser = SSEParser(api, collect_output)
    parser.feed(pieces)
    return parser.result()


def output_token_ids(parsed: ParsedStream) -> list[int] | None:
    """The output's token ids, the chunks' in order; None when the server sent none, or not for every chunk with text.

    Parse with ``collect_output`` (fast-path chunks are otherwise never read in full).
    """
    if not any(ids is not None for ids in parsed.chunk_token_ids):
        return None
    out: list[int] = []
    for text, ids in zip(parsed.chunk_texts, parsed.chunk_token_ids):
        if ids is None:
            if text:
                return None  # text without its ids: the sequence would have a hole
            continue
        out.extend(ids)
    return out


def output_text(parsed: ParsedStream) -> str:
    """The output's text, the chunks' in order (parse with ``collect_output``)."""
    return "".join(t for t in parsed.chunk_texts if t)


def chunk_token_counts(
    parsed: ParsedStream, tokenizer: TokenCounter | None
) -> tuple[list[float], list[int], TokenSource, int | None]:
    """Token-bearing chunk times, their token counts, the count's source, and total output tokens.

    With server usage on every chunk, a chunk's tokens are the rise of the
    server's running completion_tokens; chunks that carry none (role headers,
    a finish-reason-only chunk) are dropped.
    """
    times: list[float] = []
    tokens: list[int] = []
    usage = parsed.chunk_usage
    if usage and None not in usage:
        # A chunk's tokens are the rise of the running maximum of completion_tokens (the first chunk's rise is from 0).
        # A loop, not numpy: on a stream's few dozen chunks numpy's calls cost more than the arithmetic.
        top: int | None = None
        for t, u in zip(parsed.chunk_times, usage, strict=True):
            assert u is not None  # checked above
            if top is None:
                rise, top = u, u
            elif u > top:
                rise, top = u - top, u
            else:
                continue
            if rise > 0:
                times.append(t)
                tokens.append(rise)
        assert top is not None
        return times, tokens, "server_usage", parsed.completion_tokens or top
    source: TokenSource = "local_tokenizer" if tokenizer is not None else "chunk_count"
    for t, text in zip(parsed.chunk_times, parsed.chunk_texts):
        if not text:
            continue
        n = tokenizer(text) if tokenizer is not None else 1
        if n > 0:
            times.append(t)
            tokens.append(n)
    total = parsed.completion_tokens if parsed.completion_tokens is not None else sum(tokens)
    return times, tokens, source, total
