"""A vLLM stream taken apart, to say *which* part of two streams differs: the generation or the serving.

Two streams of the same greedy request can differ for two reasons that have nothing to do with each other:

* the generation: the tokens (a near-tie of the logits on a CPU server, decided differently under another
  batch or prefix-cache state) or their grouping into events (vLLM puts several tokens in one delta when
  its output loop falls behind the engine, as on a loaded machine);
* the serving: the SSE framing (``data: `` lines and blank lines, ``[DONE]``) and each event's JSON apart from
  its generated text (keys, their order and spacing, ``usage``, ``finish_reason``), which is what a proxy
  between the client and the server could change.

``parts`` splits a stream into those; ``difference`` names the first part in which two streams differ. Pure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = ["StreamParts", "difference", "parts"]

# The generated text of an event: a chat delta's "content" or a completion's "text", a JSON string literal.
_TEXT = re.compile(rb'"(content|text)":\s*"(?:[^"\\]|\\.)*"')
_CREATED = re.compile(rb'"created":\s*\d+')


@dataclass(frozen=True)
class StreamParts:
    """One SSE stream: its framing, its events' shapes (the JSON with the text and ``created`` masked), and
    the generated text of each event (None for an event without any: the role, the finish, ``[DONE]``)."""

    framing: bytes
    shapes: tuple[bytes, ...]
    texts: tuple[str | None, ...]

    @property
    def text(self) -> str:
        return "".join(t for t in self.texts if t)

    @property
    def distinct_shapes(self) -> tuple[bytes, ...]:
        """The shapes with repeats in a row collapsed: the same for two groupings of the same serving."""
        out: list[bytes] = []
        for s in self.shapes:
            if not out or out[-1] != s:
                out.append(s)
        return tuple(out)


def _event_text(payload: bytes) -> str | None:
    if payload == b"[DONE]":
        return None
    obj = json.loads(payload)
    choices = obj.get("choices") or [{}]
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") if "delta" in choice else choice.get("text")
    return text if isinstance(text, str) and text else None


def parts(stream: bytes) -> StreamParts:
    """``stream`` (the body of a streamed response) in parts; ValueError if an event is not ``data: ...``."""
    framing: list[bytes] = []
    shapes: list[bytes] = []
    texts: list[str | None] = []
    events = stream.split(b"\n\n")
    for i, event in enumerate(events):
        if i == len(events) - 1:
            framing.append(event)  # what follows the last blank line: nothing in a well-formed stream
            break
        if not event.startswith(b"data: "):
            raise ValueError(f"event {i} is not a data line: {event[:80]!r}")
        payload = event.removeprefix(b"data: ")
        framing.append(b"data: {}\n\n" if payload != b"[DONE]" else b"data: [DONE]\n\n")
        shapes.append(_CREATED.sub(b'"created":0', _TEXT.sub(lambda m: b'"' + m.group(1) + b'":"..."', payload)))
        texts.append(_event_text(payload))
    return StreamParts(b"".join(framing), tuple(shapes), tuple(texts))


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def difference(direct: bytes, proxied: bytes) -> tuple[str, str] | None:
    """Where two streams of the same request differ, as (``"serving"`` or ``"generation"``, in words); None
    when their bytes are the same. The serving is compared first: a proxy that changed the framing or an
    event's JSON is named whatever the tokens did."""
    if direct == proxied:
        return None
    d, p = parts(direct), parts(proxied)
    sizes = f"{len(direct)} bytes direct, {len(proxied)} through the proxy"
    if d.distinct_shapes != p.distinct_shapes:
        for i, (x, y) in enumerate(zip(d.distinct_shapes, p.distinct_shapes, strict=False)):
            if x != y:
                return "serving", f"{sizes}: event shape {i} differs: {x[:300]!r} direct, {y[:300]!r} proxied"
        return "serving", f"{sizes}: {len(d.distinct_shapes)} event shapes direct, {len(p.distinct_shapes)} proxied"
    if d.text != p.text:
        at = _first_difference(d.text, p.text)
        return "generation", (
            f"{sizes}: the generated text differs from character {at}: {d.text[at : at + 40]!r} direct, "
            f"{p.text[at : at + 40]!r} proxied (the same text before it: {d.text[:at][-40:]!r})"
        )
    dt, pt = [t for t in d.texts if t], [t for t in p.texts if t]
    if dt != pt:
        return "generation", (
            f"{sizes}: the same text in {len(dt)} text events direct and {len(pt)} proxied: grouped differently "
            f"({[t for t in dt if t not in pt][:5]} direct, {[t for t in pt if t not in dt][:5]} proxied)"
        )
    if d.framing != p.framing:
        return "serving", f"{sizes}: the SSE framing differs"
    return "serving", f"{sizes}: the same framing, shapes and texts, yet the bytes differ"
