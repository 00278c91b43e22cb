"""The SSE parser: event stamping, the fast path against full JSON parsing, and odd streams."""

import itertools
import json
import random

import numpy as np
import pytest

from specguard.loadgen.sse import ParsedStream, SSEParser, chunk_token_counts, parse_stream


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


def plain_scan_times(pieces: list[tuple[float, bytes]]) -> list[float]:
    """Each event's time by the definition, byte by byte: the read that holds the last byte of its blank line."""
    blob = b"".join(d for _, d in pieces)
    owner = [t for t, d in pieces for _ in range(len(d))]
    times, pos = [], 0
    while (i := blob.find(b"\n\n", pos)) >= 0:
        times.append(owner[i + 1])
        pos = i + 2
    return times


@pytest.mark.parametrize("seed", range(6))
def test_event_times_with_whole_merged_or_cut_reads_match_a_plain_scan(seed):
    """The common read (one whole event, as vLLM writes them) is stamped without numpy's search; reads that merge
    events or cut one anywhere take the search. Both give the definition's times. Seed 0: every read one event."""
    rng = random.Random(seed)
    events = stream([(f"t{i}", i) for i in range(1, 30)])
    blob = b"".join(events)
    ends = list(itertools.accumulate(map(len, events)))
    keep = 1.0 if seed == 0 else 0.7
    cuts = {e for e in ends[:-1] if rng.random() < keep} | (set() if seed == 0 else set(rng.sample(range(1, len(blob)), 5)))
    bounds = [0, *sorted(cuts), len(blob)]
    pieces = [(i * 0.01, blob[a:b]) for i, (a, b) in enumerate(itertools.pairwise(bounds))]
    parsed = parse_stream(pieces, "completions")
    assert parsed.chunk_times == plain_scan_times(pieces)[:29]  # the last two events are usage only and [DONE]
    assert parsed.chunk_usage == list(range(1, 30)) and parsed.done


@pytest.mark.parametrize("seed", range(6))
def test_chunk_tokens_are_the_rises_of_the_running_maximum_of_usage(seed):
    """A loop computes what numpy's maximum.accumulate and diff computed before (checked against them here)."""
    rng = random.Random(seed)
    usage, value = [], rng.choice([0, 2])
    for _ in range(rng.randint(1, 50)):
        value = max(0, value + rng.choice([-2, 0, 1, 1, 2, 3]))  # repeats and, rarely, a lower count
        usage.append(value)
    times = [i * 0.02 for i in range(len(usage))]
    got = chunk_token_counts(ParsedStream(chunk_times=times, chunk_usage=list(usage)), None)
    running = np.maximum.accumulate(np.asarray(usage, dtype=np.int64))
    rise = np.diff(running, prepend=0)
    want = (np.asarray(times)[rise > 0].tolist(), rise[rise > 0].tolist(), "server_usage", int(running[-1]))
    assert got == want
