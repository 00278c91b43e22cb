"""Asking vLLM for running usage on the client's behalf, and taking it out again before the client sees it.

The canary measures tokens per chunk from the server's running ``completion_tokens`` (as bench does), so a
streaming request that did not ask for continuous usage is sent upstream with ``stream_options:
{"include_usage": true, "continuous_usage_stats": true}``. The client must still receive, byte for byte,
what the server would have sent without that option. vLLM 0.32 (``entrypoints/openai/{completion,
chat_completion}/serving.py``) differs in three ways when the option is on:

1. each chunk carries ``"usage":{...}`` (set as ``chunk.usage = UsageInfo(...)``; serialised with
   ``model_dump_json(exclude_unset=True)``, compact, ``usage`` right after ``choices``);
2. with ``include_usage`` a final usage-only chunk (``"choices":[]``) precedes ``data: [DONE]``;
3. ``system_fingerprint`` (None unless the server configures one) is stamped on the terminal chunk (the
   one with a ``finish_reason``) only when ``include_usage`` is off; with it on, it rides on the final chunk.

So: (1) the structural ``,"usage":{...}`` member is cut out of every chunk that has choices, at the byte
level (never re-serialised: orjson and pydantic format numbers and escapes differently); it cannot be
matched inside a JSON string because a quote there is always escaped. (2) the final usage chunk is dropped
when the client did not ask for ``include_usage`` and kept (unchanged) when it did. (3) when it is dropped,
the terminal chunk is held until the final chunk arrives, and the final chunk's ``"system_fingerprint"``
value (its bytes) is spliced in where ``usage`` was, which is where pydantic puts the field (it follows
``usage`` in both response models). With ``n > 1`` the choices finish at different times, so holding would
stall the stream: the proxy passes ``hold_terminal=False`` and a configured fingerprint is then not restored.

Events are split on the blank line ``\\n\\n`` that vLLM writes; an event split across reads is held until
it is complete (what is forwarded is otherwise forwarded as it arrives).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NO_CHANGE",
    "UsagePlan",
    "UsageStripper",
    "fingerprint_value",
    "request_with_usage",
    "strip_usage_member",
]

_USAGE_KEY = b',"usage":'
_FINGERPRINT_KEY = b',"system_fingerprint":'
# Structural: preceded by the object's own punctuation; inside a string the quote would be escaped.
# Both are found from their literal part, then the byte before is checked: re finds a literal prefix fast,
# but tries a pattern that starts with a class at every byte (2.2 us each on a 130-byte chunk). With the
# flat-object path of _value_end, feed went from 12.5 to 7.3 us per chunk (2-core dev VM, bench/proxy_overhead.py).
_FINISHED_KEY = b'"finish_reason":"'
# The same members as another server may space them (``json.dumps``' default ", " and ": ", valid JSON, the
# same data): tried only when the compact form is absent, so vLLM's chunks never pay for them. Before issue 28
# a server writing ``, "usage": `` had every chunk's usage forwarded to clients that never asked (0 of 12
# streams identical). A quote right after ``,`` and spaces is structural: inside a string it would be escaped.
_USAGE_SPACED = re.compile(rb',\s*"usage"\s*:\s*')
_FINISHED_SPACED = re.compile(rb'[,{]\s*"finish_reason"\s*:\s*"')
_FINGERPRINT_SPACED = re.compile(rb',\s*"system_fingerprint"\s*:\s*')
_CHOICES_EMPTY = re.compile(rb'"choices":\s*\[\s*\]')
_SEP = b"\n\n"


@dataclass(frozen=True)
class UsagePlan:
    """What the proxy changed in the request, and so what it must undo in the response."""

    strip: bool  # the proxy turned continuous usage on: cut "usage" out of every chunk with choices
    drop_final: bool  # the client did not ask for include_usage: drop the final usage-only chunk


NO_CHANGE = UsagePlan(strip=False, drop_final=False)


def request_with_usage(raw: bytes) -> tuple[bytes, Any, UsagePlan]:
    """The body to send upstream, the client's parsed body (None if it is not JSON), and the plan.

    Only a streaming request (``"stream": true``) without continuous usage is changed; otherwise, and for a
    body that is not valid JSON, the client's bytes go upstream unchanged.
    """
    try:
        body = json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        return raw, None, NO_CHANGE
    if not isinstance(body, dict) or body.get("stream") is not True:
        return raw, body, NO_CHANGE
    options = body.get("stream_options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        return raw, body, NO_CHANGE  # the server answers this with a 400 of its own
    # vLLM's should_include_usage: continuous usage only counts together with include_usage.
    include = bool(options.get("include_usage"))
    if include and bool(options.get("continuous_usage_stats")):
        return raw, body, NO_CHANGE
    upstream = dict(body)
    upstream["stream_options"] = {**options, "include_usage": True, "continuous_usage_stats": True}
    encoded = json.dumps(upstream, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return encoded, body, UsagePlan(strip=True, drop_final=not include)


def _value_end(data: bytes, start: int) -> int:
    """The index just past the JSON value that begins at ``start`` (an object, array, string or scalar)."""
    if data[start : start + 1] == b"{":
        # Fast path for a flat object (vLLM's usage): no nesting, no escapes, an even number of quotes before
        # the first "}" means that "}" is outside any string, so it closes the object. Else the full scan.
        close = data.find(b"}", start)
        inner = data[start + 1 : close]
        nested = b"{" in inner or b"[" in inner or b"]" in inner or b"\\" in inner
        if close > 0 and not nested and inner.count(b'"') % 2 == 0:
            return close + 1
    depth = 0
    in_string = False
    i = start
    n = len(data)
    while i < n:
        c = data[i]
        if in_string:
            if c == 0x5C:  # backslash: skip the escaped byte
                i += 2
                continue
            if c == 0x22:
                in_string = False
                if depth == 0:
                    return i + 1
        elif c == 0x22:
            in_string = True
        elif c in (0x7B, 0x5B):  # { [
            depth += 1
        elif c in (0x7D, 0x5D):  # } ]
            if depth == 0:
                return i  # a scalar ended by its object's close
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == 0x2C and depth == 0:  # a scalar ended by the next member
            return i
        i += 1
    return n


def _last_member(event: bytes, compact: bytes, spaced: re.Pattern[bytes]) -> tuple[int, int] | None:
    """(where the member's ``,`` is, where its value starts) for the last structural ``,"key":``, compact or spaced."""
    at = event.rfind(compact)
    if at >= 0:
        return at, at + len(compact)
    found = None
    for found in spaced.finditer(event):  # noqa: B007  the last match is the one wanted
        pass
    return None if found is None else (found.start(), found.end())


def strip_usage_member(event: bytes) -> tuple[bytes, int | None]:
    """``event`` without its top-level ``,"usage":...`` member, and the offset where it was (None: none found)."""
    stripped, at, _ = _strip_usage(event)
    return stripped, at


def _strip_usage(event: bytes) -> tuple[bytes, int | None, bytes]:
    """As ``strip_usage_member``, plus the member's own ``,"usage":`` bytes (their spacing, for the fingerprint)."""
    member = _last_member(event, _USAGE_KEY, _USAGE_SPACED)
    if member is None:
        return event, None, _USAGE_KEY
    at, start = member
    return event[:at] + event[_value_end(event, start) :], at, event[at:start]


def _structural(event: bytes, key: bytes) -> bool:
    """Whether ``key`` occurs right after a ``,`` or ``{`` (a member name, not text inside a string)."""
    at = event.find(key)
    while at >= 0:
        if at > 0 and event[at - 1] in b",{":
            return True
        at = event.find(key, at + 1)
    return False


def _no_choices(event: bytes) -> bool:
    """Whether the event has a structural ``"choices": []`` (``[,{]\\s*"choices":\\s*\\[\\s*\\]``)."""
    if _CHOICES_EMPTY.search(event) is None:  # every chunk but the last: no loop, no generator
        return False
    return any(event[: m.start()].rstrip()[-1:] in (b",", b"{") for m in _CHOICES_EMPTY.finditer(event))


def fingerprint_value(event: bytes) -> bytes | None:
    """The raw bytes of the event's ``"system_fingerprint"`` value (quotes included), or None."""
    member = _last_member(event, _FINGERPRINT_KEY, _FINGERPRINT_SPACED)
    if member is None:
        return None
    return event[member[1] : _value_end(event, member[1])]


def _terminal(event: bytes) -> bool:
    """Whether the chunk has a structural ``"finish_reason": "..."`` (a string, not null), compact or spaced."""
    if _structural(event, _FINISHED_KEY):
        return True
    return b'"finish_reason"' in event and _FINISHED_SPACED.search(event) is not None


class UsageStripper:
    """Undoes a ``UsagePlan`` on a stream, incrementally: ``feed`` each upstream read, then ``finish``.

    Each call returns the bytes to forward now. Complete events are forwarded at once, except a held
    terminal chunk (and whatever follows it) while the final usage chunk may still bring a fingerprint.
    """

    def __init__(self, plan: UsagePlan, hold_terminal: bool = True) -> None:
        self.plan = plan
        self.hold_terminal = hold_terminal and plan.drop_final
        self._buf = b""
        # (event, usage offset if terminal else None, the fingerprint's key as the server would space it)
        self._held: list[tuple[bytes, int | None, bytes]] = []

    def feed(self, data: bytes) -> bytes:
        if not self.plan.strip:
            return data
        data = self._buf + data
        events = data.split(_SEP)
        self._buf = events.pop()
        return b"".join(self._event(e) for e in events)

    def finish(self) -> bytes:
        """What is left at the end of the stream: held events as they are, then any incomplete event."""
        out = self._release(None) + self._buf
        self._buf = b""
        return out

    def _event(self, event: bytes) -> bytes:
        if not event.startswith(b"data: {"):
            return self._release(None) + event + _SEP  # [DONE], comments, anything not a JSON chunk
        if _no_choices(event):
            if self.plan.drop_final:
                return self._release(fingerprint_value(event))
            return self._release(None) + event + _SEP
        stripped, at, key = _strip_usage(event)
        terminal = _terminal(stripped)
        if self._held or (terminal and self.hold_terminal):
            # The fingerprint goes where usage was, spaced as the server spaced usage's own key.
            self._held.append((stripped, at if terminal else None, key.replace(b'"usage"', b'"system_fingerprint"')))
            return b""
        return stripped + _SEP

    def _release(self, fingerprint: bytes | None) -> bytes:
        out = []
        for event, at, key in self._held:
            if fingerprint is not None and at is not None:
                event = event[:at] + key + fingerprint + event[at:]
            out.append(event + _SEP)
        self._held = []
        return b"".join(out)
