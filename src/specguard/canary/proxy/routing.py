"""What the proxy reads off a request to route and label it: its sticky key, its segment, its prompt text. Pure.

The sticky key and the segment come from the rollout file (``rollout.StickyKey``, ``rollout.SegmentKey``).
A value the request does not carry is ``None`` for the key (the request is then split per request) and
``"unknown"`` for the segment; prompt rules that match nothing give ``"default"``, as ``specguard assess``
does for the same rules, so a canary's segments line up with an assessment's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from specguard.canary.spec.rollout import SegmentKey, StickyKey

__all__ = ["NO_RULE_MATCHED", "UNKNOWN_SEGMENT", "Api", "SegmentRules", "prompt_text", "sticky_key"]

Api = Literal["completions", "chat"]
UNKNOWN_SEGMENT = "unknown"
NO_RULE_MATCHED = "default"


def sticky_key(key: StickyKey, headers: Mapping[str, str], body: Any) -> str | None:
    """The request's sticky key, or None (no key configured, or the request lacks it)."""
    if key.source == "header" and key.header is not None:
        return headers.get(key.header) or None  # aiohttp's headers are case-insensitive
    if key.source == "user" and isinstance(body, dict):
        user = body.get("user")
        return user if isinstance(user, str) and user else None
    return None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: the text ones
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prompt_text(api: Api, body: Any) -> str:
    """The prompt as text: a completion's ``prompt`` (a list of strings joined), or the chat messages' text contents joined."""
    if not isinstance(body, dict):
        return ""
    if api == "completions":
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list):
            return "\n".join(p for p in prompt if isinstance(p, str))
        return ""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    return "\n".join(_content_text(m.get("content")) for m in messages if isinstance(m, dict))


class SegmentRules:
    """A ``SegmentKey`` with its patterns compiled once."""

    def __init__(self, key: SegmentKey) -> None:
        self.key = key
        self.rules = [(r.name, re.compile(r.pattern)) for r in key.rules]

    def segment(self, api: Api, headers: Mapping[str, str], body: Any) -> str:
        source = self.key.source
        if source == "none":
            return "all"
        if source == "model":
            model = body.get("model") if isinstance(body, dict) else None
            return model if isinstance(model, str) and model else UNKNOWN_SEGMENT
        if source == "header" and self.key.header is not None:
            return headers.get(self.key.header) or UNKNOWN_SEGMENT
        if not isinstance(body, dict):
            return UNKNOWN_SEGMENT
        text = prompt_text(api, body)
        for name, pattern in self.rules:
            if pattern.search(text):
                return name
        return NO_RULE_MATCHED
