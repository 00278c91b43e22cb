"""The record writer's parser collects each output's token ids (vLLM's return_token_ids), or its text without them."""

from __future__ import annotations

import json

from specguard.loadgen.client import build_payload
from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.sse import output_text, output_token_ids, parse_stream
from specguard.results.models import SamplingOverrides


def vllm_stream(deltas: list[tuple[str, list[int] | None]], chat: bool = False) -> list[tuple[float, bytes]]:
    """Events shaped as vLLM 0.32 sends them with continuous usage: compact, usage last."""
    pieces = []
    total = 0
    for i, (text, ids) in enumerate(deltas):
        total += len(ids) if ids is not None else 1
        choice: dict[str, object] = {"index": 0, "finish_reason": "length" if i == len(deltas) - 1 else None}
        choice |= {"delta": {"content": text}} if chat else {"text": text}
        if ids is not None:
            choice["token_ids"] = ids
        event = {"id": "x", "choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": total}}
        pieces.append((0.01 * i, b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"))
    pieces.append((1.0, b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n' % total))
    pieces.append((1.0, b"data: [DONE]\n\n"))
    return pieces


def test_token_ids_of_every_chunk_are_collected_in_order_on_the_fast_path() -> None:
    stream = vllm_stream([(" a", [11]), (" b c", [12, 13]), (" d", [14])])
    for chat in (False, True):
        parsed = parse_stream(
            vllm_stream([(" a", [11]), (" b c", [12, 13]), (" d", [14])], chat), "chat" if chat else "completions", True
        )
        assert output_token_ids(parsed) == [11, 12, 13, 14]
        assert output_text(parsed) == " a b c d"
    # without collect_output the fast path never reads the chunks in full (and so has no ids)
    assert output_token_ids(parse_stream(stream, "completions")) is None


def test_a_server_without_token_ids_leaves_the_text_to_compare() -> None:
    parsed = parse_stream(vllm_stream([(" a", None), (" b", None)]), "completions", True)
    assert output_token_ids(parsed) is None and output_text(parsed) == " a b"


def test_a_chunk_with_text_but_no_ids_makes_the_sequence_unknown_not_short() -> None:
    parsed = parse_stream(vllm_stream([(" a", [11]), (" b", None)]), "completions", True)
    assert output_token_ids(parsed) is None


def test_token_ids_are_asked_for_only_when_outputs_are_collected() -> None:
    item = synthetic_prompts("random", count=1).items[0]
    assert "return_token_ids" not in build_payload("completions", "m", item, SamplingOverrides(), 8)
    assert build_payload("chat", "m", item, SamplingOverrides(), 8, return_token_ids=True)["return_token_ids"] is True
