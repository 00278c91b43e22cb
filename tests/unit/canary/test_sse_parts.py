"""``tests/sse_parts.py``, the byte-identity test's diagnosis: which part of two streams differs, on streams shaped
as vLLM 0.32 writes a chat stream (compact JSON, ``created`` seconds, ``[DONE]``)."""

from __future__ import annotations

from tests.sse_parts import difference, parts

HEAD = b'{"id":"chatcmpl-r","object":"chat.completion.chunk","created":%d,"model":"specguard-tiny","choices":[{"index":0,'
ROLE = b"data: " + HEAD % 1 + b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
DONE = b"data: [DONE]\n\n"


def event(text: str, finish: str = "null", created: int = 1) -> bytes:
    return (
        b"data: "
        + HEAD % created
        + b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":%s}]}\n\n'
        % (
            text.encode(),
            finish.encode(),
        )
    )


STREAM = ROLE + event(" 825") + event("469") + event("469", '"length"') + DONE


def test_a_stream_in_parts() -> None:
    p = parts(STREAM)
    assert p.texts == (None, " 825", "469", "469", None) and p.text == " 825469469"
    assert p.framing == b"data: {}\n\n" * 4 + DONE
    assert len(p.distinct_shapes) == 4  # role, text, the terminal event, [DONE]
    assert difference(STREAM, STREAM) is None


def test_the_same_text_in_fewer_events_is_the_generation() -> None:
    merged = ROLE + event(" 825469") + event("469", '"length"', created=2) + DONE
    part, what = difference(STREAM, merged) or ("", "")
    assert part == "generation" and "grouped differently" in what and "3 text events direct and 2 proxied" in what


def test_another_token_is_the_generation_and_says_where() -> None:
    other = ROLE + event(" 825") + event("470") + event("469", '"length"') + DONE
    part, what = difference(STREAM, other) or ("", "")
    assert part == "generation" and "from character 5: '69469' direct, '70469' proxied" in what


def test_json_spaced_otherwise_or_a_usage_member_left_in_is_the_serving() -> None:
    spaced = STREAM.replace(b'"model":"specguard-tiny"', b'"model": "specguard-tiny"')
    usage = STREAM.replace(b'"finish_reason":null}]}', b'"finish_reason":null}],"usage":{"completion_tokens":1}}')
    for changed in (spaced, usage):
        part, what = difference(STREAM, changed) or ("", "")
        assert part == "serving" and "event shape 0 differs" in what, what


def test_a_serving_change_is_named_even_when_the_generation_differs_too() -> None:
    both = (ROLE + event(" 825469") + event("469", '"length"') + DONE).replace(b'"object":', b'"object": ')
    assert (difference(STREAM, both) or ("",))[0] == "serving"
