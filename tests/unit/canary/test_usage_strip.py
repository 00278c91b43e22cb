"""The usage the proxy asks for comes back out byte for byte: what the client receives is what vLLM would have sent.

``vllm_stream`` writes a stream the way vLLM 0.32's serving code does (``completion/serving.py`` and
``chat_completion/serving.py``): compact pydantic JSON, ``exclude_unset`` chunks with ``usage`` after
``choices`` only under continuous usage, the final ``"choices":[]`` chunk (``exclude_none``) only with
include_usage, and ``system_fingerprint`` on the terminal chunk only when include_usage is off.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from specguard.canary.proxy.usage_strip import (
    NO_CHANGE,
    UsagePlan,
    UsageStripper,
    _no_choices,
    _structural,
    _value_end,
    fingerprint_value,
    request_with_usage,
    strip_usage_member,
)

# Text that looks like the structures the stripper searches for: quotes inside a JSON string are escaped.
TRICKY = [" Hello", ',"usage":{"prompt_tokens":1}', ' "finish_reason":"stop"', '"choices":[]', " é\\n}", "}}"]


SEPARATORS = {"compact": (",", ":"), "spaced": (", ", ": ")}  # vLLM's pydantic, and json.dumps' default


def _dump(obj: dict[str, Any], spacing: str = "compact") -> str:
    return json.dumps(obj, separators=SEPARATORS[spacing], ensure_ascii=False)


def vllm_stream(
    api: str,
    include_usage: bool,
    continuous: bool,
    fingerprint: str | None,
    texts: list[str],
    details: bool = False,
    spacing: str = "compact",
) -> bytes:
    """One response as vLLM 0.32 streams it for these stream_options (n = 1, one prompt of 5 tokens)."""
    continuous = include_usage and continuous
    head = {"id": "cmpl-7f3a", "object": "text_completion" if api == "completions" else "chat.completion.chunk"}
    head |= {"created": 1764000000, "model": "Qwen/Qwen3-0.6B"}
    events: list[str] = []
    prompt = 5
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        finish = "length" if last else None
        if api == "completions":
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            choice |= {"prompt_token_ids": None, "token_ids": None}
        else:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        chunk: dict[str, Any] = {**head, "choices": [choice]}
        if continuous:
            usage: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + i + 1, "completion_tokens": i + 1}
            if api == "chat":
                usage["completion_tokens_details"] = {"reasoning_tokens": 0} if details else None
            chunk["usage"] = usage
        if not include_usage and fingerprint is not None and finish is not None:
            chunk["system_fingerprint"] = fingerprint
        events.append(_dump(chunk, spacing))
    if include_usage:
        final: dict[str, Any] = {**head, "choices": []}
        final["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt + len(texts), "completion_tokens": len(texts)}
        if fingerprint is not None:
            final["system_fingerprint"] = fingerprint
        events.append(_dump(final, spacing))
    events.append("[DONE]")
    return "".join(f"data: {e}\n\n" for e in events).encode()


def run(plan: UsagePlan, reads: list[bytes], hold_terminal: bool = True) -> bytes:
    stripper = UsageStripper(plan, hold_terminal)
    return b"".join(stripper.feed(r) for r in reads) + stripper.finish()


def splits(data: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 12))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def client_options(include: bool | None, continuous: bool | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if include is not None:
        options["include_usage"] = include
    if continuous is not None:
        options["continuous_usage_stats"] = continuous
    return options


CLIENT_OPTIONS = [(None, None), (False, None), (True, None), (True, False), (False, True), (None, True)]


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize(("include", "continuous"), CLIENT_OPTIONS)
@pytest.mark.parametrize("fingerprint", [None, "fp_44709d6fcb"])
@pytest.mark.parametrize("spacing", ["compact", "spaced"])
def test_client_receives_what_the_server_sends_without_the_option(
    api: str, include: bool | None, continuous: bool | None, fingerprint: str | None, spacing: str
) -> None:
    """Whichever way the server spaces its JSON (issue 28: a server writing ``, "usage": `` had every chunk's usage
    forwarded to clients that never asked)."""
    options = client_options(include, continuous)
    body: dict[str, Any] = {"model": "m", "prompt": "p", "stream": True}
    if options:
        body["stream_options"] = options
    sent, parsed, plan = request_with_usage(json.dumps(body).encode())
    upstream_options = json.loads(sent)["stream_options"]
    assert upstream_options["include_usage"] is True and upstream_options["continuous_usage_stats"] is True
    assert parsed == body
    wanted = vllm_stream(api, bool(include), bool(continuous), fingerprint, TRICKY, details=api == "chat", spacing=spacing)
    served = vllm_stream(api, True, True, fingerprint, TRICKY, details=api == "chat", spacing=spacing)
    assert served != wanted
    assert run(plan, [served]) == wanted
    for seed in range(5):  # events split across reads anywhere
        assert run(plan, splits(served, seed)) == wanted
    assert run(plan, [served[i : i + 1] for i in range(len(served))]) == wanted


def test_a_request_that_already_asks_for_continuous_usage_is_forwarded_as_sent() -> None:
    raw = b'{"model": "m", "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}}'
    sent, _, plan = request_with_usage(raw)
    assert sent is raw and plan == NO_CHANGE
    served = vllm_stream("completions", True, True, "fp", TRICKY)
    assert run(plan, splits(served, 1)) == served


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "m", "prompt": "p"}',
        b'{"stream": false}',
        b"{not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"stream": true, "stream_options": 3}',
    ],
)
def test_non_streaming_or_unparsable_bodies_are_not_changed(raw: bytes) -> None:
    sent, _, plan = request_with_usage(raw)
    assert sent is raw and plan == NO_CHANGE


def test_other_stream_options_are_kept() -> None:
    sent, _, plan = request_with_usage(b'{"stream": true, "stream_options": {"include_usage": true, "x": 1}}')
    assert json.loads(sent)["stream_options"] == {"include_usage": True, "x": 1, "continuous_usage_stats": True}
    assert plan == UsagePlan(strip=True, drop_final=False)


def test_strip_usage_member_handles_nested_objects_and_null() -> None:
    base = b'data: {"id":"x","choices":[{"index":0,"text":"a,\\"usage\\":{}"}]'
    for usage in (b'{"prompt_tokens":1,"completion_tokens_details":{"reasoning_tokens":0}}', b"null"):
        stripped, at = strip_usage_member(base + b',"usage":' + usage + b',"system_fingerprint":"f"}')
        assert stripped == base + b',"system_fingerprint":"f"}'
        assert at == len(base)
    assert strip_usage_member(base + b"}") == (base + b"}", None)


def test_fingerprint_value_keeps_escapes() -> None:
    assert fingerprint_value(b'{"choices":[],"system_fingerprint":"fp\\"q"}') == b'"fp\\"q"'
    assert fingerprint_value(b'{"choices":[]}') is None


def test_without_holding_a_configured_fingerprint_is_not_restored_but_nothing_else_differs() -> None:
    # n > 1: the proxy does not hold terminal chunks (the stream would stall); only the fingerprint is missing.
    plan = UsagePlan(strip=True, drop_final=True)
    served = vllm_stream("completions", True, True, "fp_1", TRICKY)
    assert run(plan, [served], hold_terminal=False) == vllm_stream("completions", False, False, None, TRICKY)


def test_an_error_event_and_a_truncated_stream_reach_the_client_as_sent() -> None:
    plan = UsagePlan(strip=True, drop_final=True)
    error = b'data: {"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}\n\n'
    served = vllm_stream("chat", True, True, None, ["a", "b"]).split(b"data: {", 3)
    partial = b"data: {" + served[1]  # the first chunk, with its usage
    out = run(plan, [partial, error, b'data: {"id":"cut'])
    assert out == strip_usage_member(partial[:-2])[0] + b"\n\n" + error + b'data: {"id":"cut'


# The regexes and the full scan the fast paths replaced: the fast paths must agree with them on every input.
_FINISHED_RE = re.compile(rb'[,{]"finish_reason":"')
_NO_CHOICES_RE = re.compile(rb'[,{]\s*"choices":\s*\[\s*\]')
FAST_PATH_CASES = [
    b'data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":3}}',
    b'data: {"id":"a", \n "choices" :[]}',
    b'data: {"id":"a",\t"choices":[ \n ]}',
    b'data: {"id":"\\"choices\\":[]","choices":[{"text":"x"}]}',
    b'data: {"id":"x","choices":[{"text":"\\",\\"finish_reason\\":\\"stop"}]}',
    b'data: {"id":"x","choices":[{"text":"y","finish_reason":"stop"}]}',
    b'data: {"id":"x","choices":[{"text":"y","finish_reason":null}]}',
    b'{"choices":[]}',
    b'"choices":[]',
    b'"finish_reason":"',
]
FAST_VALUES = [
    b'{"prompt_tokens":8,"completion_tokens":17}',
    b'{"a":"}"}',
    b'{"a":"x\\"}","b":1}',
    b'{"a":{"b":1},"c":2}',
    b'{"a":1]}',
    b'{"a":"[","b":"]"}',
    b"{}",
    b'{"a":1',
]


def _value_end_scan(data: bytes, start: int) -> int:
    """The full scan, as it was before the flat-object fast path."""
    depth, in_string, i = 0, False, start
    while i < len(data):
        c = data[i]
        if in_string:
            if c == 0x5C:
                i += 2
                continue
            if c == 0x22:
                in_string = False
                if depth == 0:
                    return i + 1
        elif c == 0x22:
            in_string = True
        elif c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            if depth == 0:
                return i
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == 0x2C and depth == 0:
            return i
        i += 1
    return len(data)


@pytest.mark.parametrize("event", FAST_PATH_CASES)
def test_literal_searches_find_what_the_class_led_patterns_find(event: bytes) -> None:
    assert _no_choices(event) == (_NO_CHOICES_RE.search(event) is not None)
    assert _structural(event, b'"finish_reason":"') == (_FINISHED_RE.search(event) is not None)


@pytest.mark.parametrize("value", FAST_VALUES)
def test_the_flat_object_fast_path_ends_values_where_the_full_scan_does(value: bytes) -> None:
    data = b',"usage":' + value + b',"x":1}'
    assert _value_end(data, 9) == _value_end_scan(data, 9)
