"""The SSE parser: event stamping, the fast path against full JSON parsing, and odd streams."""

import json
import random

import pytest

from specguard.loadgen.sse import SSEParser, parse_stream


def ev(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(text, n, finish=None, chat=False, usage=True):
    choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
    choice["finish_reason"] = finish
    obj = {"id": "x", "choices": [choice]}
    if usage:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": n + 7}
    return obj


def stream(texts_counts, chat=False, usage=True):
    out = [
        ev(chunk(t, n, "length" if i == len(texts_counts) - 1 else None, chat, usage)) for i, (t, n) in enumerate(texts_counts)
    ]
    out.append(ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": texts_counts[-1][1]}}))
    out.append(b"data: [DONE]\n\n")
    return out


def test_each_event_gets_the_time_of_the_read_that_completed_it():
    events = stream([("a", 1), ("bc", 3), ("d", 4)])
    blob = b"".join(events)
    cut1 = len(events[0]) + 5  # the second event is split across reads 1 and 2
    pieces = [(0.1, blob[:cut1]), (0.2, blob[cut1 : cut1 + len(events[1])]), (0.3, blob[cut1 + len(events[1]) :])]
    p = parse_stream(pieces, "completions")
    assert p.chunk_times == [0.1, 0.2, 0.3]  # event 2 ends inside read 2, event 3 inside read 3
    assert p.chunk_usage == [1, 3, 4]
    assert p.done and p.finish_reason == "length" and p.prompt_tokens == 7 and p.completion_tokens == 4


@pytest.mark.parametrize("chat", [False, True])
def test_fast_path_equals_full_parse_on_tricky_texts(chat):
    rng = random.Random(5)
    nasty = ['"completion_tokens": 999', "\\\\", '"', "\\n\\n", "data: [DONE]", "\\u2603", '{"error": 1}', "x"]
    counts = list(range(1, 60))
    items = [(rng.choice(nasty) + rng.choice(nasty), n) for n in counts]
    events = stream(items, chat=chat)
    fast = parse_stream([(i * 0.01, e) for i, e in enumerate(events)], "chat" if chat else "completions")
    assert fast.chunk_usage == counts
    # full parse: the same stream with one chunk lacking usage forces the JSON path for all
    slow_events = list(events)
    no_usage = chunk("tail", 0, None, chat)
    del no_usage["usage"]
    slow_events.insert(len(events) - 2, ev(no_usage))
    slow = parse_stream([(i * 0.01, e) for i, e in enumerate(slow_events)], "chat" if chat else "completions")
    assert slow.chunk_usage[:-1] == counts and slow.chunk_usage[-1] is None
    assert slow.chunk_texts[:-1] == [t for t, _ in items]


def test_incremental_feed_matches_one_shot():
    events = stream([(f"t{i}", i) for i in range(1, 40)])
    blob = b"".join(events)
    rng = random.Random(1)
    cuts = sorted(rng.sample(range(1, len(blob)), 30))
    pieces = [(i * 0.001, blob[a:b]) for i, (a, b) in enumerate(zip([0] + cuts, cuts + [len(blob)]))]
    whole = parse_stream(pieces, "completions")
    inc = SSEParser("completions")
    for k in range(0, len(pieces), 4):
        inc.feed(pieces[k : k + 4])
    assert inc.result() == whole


def test_crlf_line_endings_even_split_between_reads():
    blob = b"".join(stream([("a", 1), ("b", 2)])).replace(b"\n", b"\r\n")
    i = blob.index(b"\r\n\r\n") + 1  # split between \r and \n
    p = parse_stream([(0.1, blob[:i]), (0.2, blob[i:])], "completions")
    assert p.chunk_usage == [1, 2] and p.done


def test_server_error_event_and_missing_done():
    pieces = [(0.1, ev(chunk("a", 1))), (0.2, ev({"error": {"message": "boom", "code": 500}}))]
    p = parse_stream(pieces, "completions")
    assert p.error == "server error in stream: boom" and not p.done
    p = parse_stream([(0.1, b"data: {not json\n\n")], "completions")
    assert p.error.startswith("unparsable stream event")


def test_a_bare_openai_error_object_in_the_stream_is_an_error():
    """``{"object": "error", ...}`` (the OpenAI ErrorResponse, not wrapped in ``{"error": ...}``) fails the request too."""
    bare = {"object": "error", "message": "max_tokens must be at least 1", "type": "BadRequestError", "code": 400}
    for pieces in (
        [(0.1, ev(chunk("a", 1))), (0.2, ev(bare)), (0.3, b"data: [DONE]\n\n")],  # fast path first, then the event
        [(0.1, ev(bare) + b"data: [DONE]\n\n")],  # the whole stream in one read
    ):
        p = parse_stream(pieces, "completions")
        assert p.error == "server error in stream: max_tokens must be at least 1", p
        assert p.done


def test_comments_and_multiline_events_take_the_full_path():
    pieces = [
        (0.1, b": keep-alive\n\n" + b"event: message\ndata: " + json.dumps(chunk("a", 1)).encode() + b"\n\n"),
        (0.2, b"data: [DONE]\n\n"),
    ]
    p = parse_stream(pieces, "completions")
    assert p.chunk_usage == [1] and p.chunk_texts == ["a"] and p.done


def test_a_truncated_event_with_usage_is_an_error_not_a_chunk():
    """The fast path counts usage by a byte search; an event that does not close its object is parsed in full."""
    good = b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}],"usage":{"completion_tokens":1}}\n\n'
    torn = b'data: {"choices":[{"index":0,"text":"b","finish_reason":null}],"usage":{"completion_tokens":2}\n\n'
    for pieces in ([(0.1, good + torn + b"data: [DONE]\n\n")], [(0.1, good), (0.2, torn), (0.3, b"data: [DONE]\n\n")]):
        parsed = parse_stream(pieces, "completions")
        assert parsed.error is not None and "unparsable stream event" in parsed.error
        assert parsed.chunk_usage == [1]
