"""Gate 1 without servers: importers, malformed lines, the profile, the candidacy rules, the written plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.check.plan import load_plan
from specguard.workload.assess import assess
from specguard.workload.candidacy import LoadFacts, decide_candidacy
from specguard.workload.importers import LogLineError, SkipCounter, read_log
from specguard.workload.next_check import write_check_plan
from specguard.workload.profile import ProfileBuilder


class IdTokenizer:
    """Whitespace tokens as ids: enough to drive the pipeline without a model."""

    vocab: dict[str, int] = {}

    def _ids(self, text: str) -> list[int]:
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]

    def prompt_ids(self, entry):  # type: ignore[no-untyped-def]
        if entry.prompt_token_ids is not None:
            return entry.prompt_token_ids
        return self._ids(entry.prompt_text() if entry.messages else entry.prompt or "")

    def output_ids(self, entry):  # type: ignore[no-untyped-def]
        if entry.response is None:
            return None
        return entry.response.token_ids or self._ids(entry.response.text or "")


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


OPENAI = {
    "request": {"model": "m", "prompt": "a b c d", "temperature": 0, "max_tokens": 8},
    "response": {"id": "cmpl-1", "created": 1764400000, "choices": [{"text": "a b c d", "finish_reason": "stop"}]},
}
CHAT = {
    "request": {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
    "response": {"body": {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}},
}
SHAREGPT = {
    "id": "c1",
    "conversations": [
        {"from": "human", "value": "q1"},
        {"from": "gpt", "value": "a1"},
        {"from": "human", "value": "q2"},
        {"from": "gpt", "value": "a2"},
    ],
}


def test_importers_map_each_format(tmp_path: Path) -> None:
    pairs = list(read_log(_write(tmp_path / "o.jsonl", [OPENAI, CHAT])))
    assert pairs[0].endpoint == "completions" and pairs[0].sampling.temperature == 0
    assert pairs[0].timestamp is not None and pairs[0].response.text == "a b c d"
    assert pairs[1].endpoint == "chat" and pairs[1].messages[0].content == "hi" and pairs[1].response.text == "hello"
    turns = list(read_log(_write(tmp_path / "s.jsonl", [SHAREGPT])))
    assert [len(t.messages) for t in turns] == [1, 3] and turns[1].response.text == "a2"
    bench = list(read_log(_write(tmp_path / "b.jsonl", [{"prompt": "x y", "segment": "s", "max_tokens": 4}])))
    assert bench[0].response is None and bench[0].segment == "s" and bench[0].sampling.max_tokens == 4


def test_malformed_lines_name_file_line_and_reason(tmp_path: Path) -> None:
    good = {"schema_version": "specguard.request_log/1", "endpoint": "completions", "prompt": "p"}
    log = _write(
        tmp_path / "bad.jsonl",
        [good, "{not json", [1, 2], {**good, "prompt": None}, {**good, "sampling": {"temperature": -1}}, good],
    )
    entries = read_log(log)
    assert next(entries).prompt == "p"  # streamed: the first entry arrives before the bad line is read
    with pytest.raises(LogLineError) as err:
        next(entries)
    assert f"{log}:2: not JSON" in str(err.value)
    skipped = SkipCounter()
    assert len(list(read_log(log, skipped=skipped))) == 2
    assert skipped.count == 4 and [e.split(":")[1] for e in skipped.examples] == ["2", "3", "4", "5"]
    assert any("sampling.temperature" in e for e in skipped.examples)
    assert any("exactly one of 'prompt'" in e for e in skipped.examples)


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LogLineError, match="cannot tell the log format"):
        list(read_log(_write(tmp_path / "x.jsonl", [{"hello": 1}])))


def test_profile_rates_concurrency_and_mix() -> None:
    b = ProfileBuilder()
    # minute 0: 3 requests, minute 1: 1 request; two overlap for a second
    for start, e2e, temp in [(0, 2, 0.0), (1, 2, 0.0), (30, 1, 1.0), (70, 1, None)]:
        b.add(start, e2e, temp, None, 10, 5)
    p = b.build()
    assert p.rate is not None and p.rate.per_minute_peak == pytest.approx(3 / 60) and p.rate.minutes == 2
    assert p.concurrency.peak == 2 and p.concurrency.mean == pytest.approx(6 / 71)  # 6 request-seconds over 71 s
    assert p.temperature_mix == {"0 (greedy)": 2, "above 0.7": 1, "unset (server default 1.0)": 1}
    assert p.prompt_tokens.p50 == 10 and p.output_tokens.count == 4


@pytest.mark.parametrize(
    ("reduction", "hot", "load", "verdict"),
    [
        (0.4, 0.0, LoadFacts(), "candidate"),
        (0.4, 0.0, LoadFacts(peak_rps=9, capacity_rps=10), "leave speculation off"),
        (0.4, 0.0, LoadFacts(peak_concurrency=90, capacity_concurrency=100), "leave speculation off"),
        (
            0.4,
            0.0,
            LoadFacts(plan_warnings=["speculation pushes the expected concurrency (9) past the KV capacity"]),
            "leave speculation off",
        ),
        (0.05, 0.0, LoadFacts(), "poor candidate"),
        (0.05, 0.9, LoadFacts(), "leave speculation off"),
        (0.15, 0.9, LoadFacts(), "poor candidate"),
        (0.15, 0.0, LoadFacts(peak_rps=1, capacity_rps=10), "candidate"),
        (None, 0.0, LoadFacts(), "poor candidate"),
    ],
)
def test_candidacy_rules(reduction, hot, load, verdict) -> None:  # type: ignore[no-untyped-def]
    c = decide_candidacy(reduction, hot, load, "ngram", {"method": "ngram"}, replayed=20)
    assert c.verdict == verdict and c.reasons
    assert (c.config is not None) == (verdict == "candidate")


def test_assess_segments_replay_and_write_a_runnable_plan(tmp_path: Path) -> None:
    lines = []
    for i in range(20):
        copy = {
            "schema_version": "specguard.request_log/1",
            "timestamp": 1764400000 + i,
            "endpoint": "completions",
            "prompt": f"extract: alpha beta gamma delta epsilon {i}",
            "sampling": {"temperature": 0},
            "response": {"text": "alpha beta gamma delta epsilon alpha beta gamma delta"},
            "timings": {"e2e_s": 0.5},
        }
        chat = {
            **copy,
            "prompt": f"tell me a story {i}",
            "sampling": {"temperature": 1.0},
            "response": {"text": " ".join(f"w{i}x{j}" for j in range(10))},
        }  # nothing repeats, not even across requests
        lines += [copy, chat]
    log = _write(tmp_path / "log.jsonl", lines)
    items: list[dict] = []
    report = assess(
        log,
        IdTokenizer(),
        "ids",
        rules=[("extract", __import__("re").compile("^extract"))],
        collect=items,
        requests_out=tmp_path / "per-request.jsonl",
    )
    rows = [json.loads(x) for x in (tmp_path / "per-request.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and rows[0]["segment"] == "extract" and rows[1]["segment"] == "default"
    assert sum(r["ngram"]["accepted"] for r in rows if r["segment"] == "extract") == report.segments["extract"].ngram.accepted
    assert {"ngram", "suffix"} <= set(rows[0])
    ext, other = report.segments["extract"], report.segments["default"]
    assert ext.requests == other.requests == 20 and report.requests == 40
    assert ext.ngram.acceptance_rate > 0.5 and ext.verdict == "candidate" and ext.config["method"] in ("ngram", "suffix")
    assert other.verdict in ("poor candidate", "leave speculation off") and other.config is None
    assert {r.config["method"] for r in ext.sweep} == {"ngram", "suffix"} and len(ext.sweep) == 23
    assert report.overall.ngram.requests == 40
    plan_path = write_check_plan(report, items, tmp_path / "next", "embedded:target", 1024)
    assert plan_path is not None
    plan = load_plan(plan_path)
    assert plan.arms.candidate.launch.speculative_config == report.overall.config
    assert plan.traffic[1].rate == pytest.approx(40 / 60, abs=0.01)  # 40 requests within one minute
    prompts = [json.loads(x) for x in (tmp_path / "next" / "prompts.jsonl").read_text().splitlines()]
    assert len(prompts) == 40 and {p["segment"] for p in prompts} == {"extract", "default"}


def test_plan_reads_an_assess_report(tmp_path: Path) -> None:
    """Gate 1 feeds Gates 2-3: the assess JSON gives plan its workload lengths and its method."""
    from specguard.sizing.run import PlanRequest, build_plan

    line = {
        "schema_version": "specguard.request_log/1",
        "endpoint": "completions",
        "prompt": "a b c d e f a b c d",
        "sampling": {"temperature": 0},
        "response": {"text": "e f a b c d e f a b c d e f"},
    }
    report = assess(_write(tmp_path / "l.jsonl", [line] * 5), IdTokenizer(), "ids", sweep=False, suffix=False)
    (tmp_path / "a.json").write_text(report.model_dump_json())
    plan = build_plan(PlanRequest(target="llama-3.1-8b", gpu="h100-80gb", gate1=tmp_path / "a.json", vllm_version="0.32.0"))
    assert plan.method == "ngram" and plan.baseline.tokens_per_sequence == 10 + 14


def test_counted_percentiles_equal_numpy() -> None:
    import random
    from collections import Counter

    import numpy as np

    from specguard.workload.profile import counted_distribution

    rng = random.Random(0)
    for _ in range(200):
        xs = [rng.randint(0, 50) for _ in range(rng.randint(1, 300))]
        d = counted_distribution(Counter(xs))
        assert [d.p50, d.p90, d.p99] == pytest.approx(list(np.percentile(xs, [50, 90, 99])))
        assert d.mean == pytest.approx(np.mean(xs)) and d.max == max(xs) and d.count == len(xs)


def test_unordered_log_gives_no_peak_concurrency() -> None:
    b = ProfileBuilder()
    b.add(10, 1, 0, None, 1, 1)
    b.add(5, 1, 0, None, 1, 1)
    c = b.build().concurrency
    assert c.peak is None and "not in arrival order" in c.source and c.mean == pytest.approx(2 / 6)


def test_a_response_too_short_to_draft_is_not_called_missing_and_saves_0_steps_not_minus_0(tmp_path: Path) -> None:
    """The old README example, joined onto one line: one response of two tokens. assess said "1 with responses" and
    then "no responses to replay", and showed "steps -0%" (issue 29)."""
    from specguard.workload.render import fewer_steps

    entry = {
        "schema_version": "specguard.request_log/1",
        "endpoint": "completions",
        "prompt": "Summarise: one two three",
        "sampling": {"temperature": 0},
        "response": {"token_ids": [12, 99]},
    }
    report = assess(_write(tmp_path / "log.jsonl", [entry]), IdTokenizer(), "ids")
    seg = report.overall
    assert seg.replayed == 1 and seg.ngram is not None and seg.ngram.drafts == 0
    assert not any("no responses to replay" in r for r in seg.reasons)
    assert any(r.startswith("no proposer drafted a token on the 1 response replayed") for r in seg.reasons), seg.reasons
    assert fewer_steps(seg.ngram.step_reduction) == "0%"
    assert (fewer_steps(0.55), fewer_steps(None)) == ("-55%", "-")
    without = assess(_write(tmp_path / "bare.jsonl", [{k: v for k, v in entry.items() if k != "response"}]), IdTokenizer(), "ids")
    assert "no responses to replay: acceptance cannot be predicted" in without.overall.reasons
