"""Real datasets and goodput against the embedded vLLM baseline, through ``specguard bench`` (in-process CLI).

A ShareGPT file (every assistant turn an item: the conversation so far goes to the chat API) and a Spec-Bench
``question.jsonl`` (its categories become segments), each run with ``--slo``. The summary's goodput, attainment
and misses are recomputed here from requests.jsonl by the definitions in analysis/slo.py, with nothing of
specguard's, and the token counts are the server's own (usage per request, the generation counter overall).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from specguard.cli.app import app
from specguard.embedded.servers import SERVED_NAME

pytestmark = pytest.mark.vllm

CONVERSATIONS = [
    {
        "id": "c1",
        "conversations": [
            {"from": "system", "value": "You are a terse assistant."},
            {"from": "human", "value": "Name three rivers in Europe."},
            {"from": "gpt", "value": "The Danube, the Rhine and the Loire, all of them long and old."},
            {"from": "human", "value": "Which one is the longest?"},
            {"from": "gpt", "value": "The Danube."},
        ],
    },
    {"id": "empty", "conversations": []},  # public dumps hold these: skipped and counted
    {"id": "c2", "conversations": [{"from": "human", "value": "Write a short poem about rain."}, {"from": "gpt", "value": "."}]},
]

QUESTIONS = [
    {"question_id": 1, "category": "writing", "turns": ["Write a haiku about autumn.", "Now make it sadder."]},
    {"question_id": 2, "category": "math", "turns": ["What is 17 times 23?"]},
    {"question_id": 3, "category": "coding", "turns": ["Write a Python function that reverses a list."]},
    {"question_id": 4, "category": "writing", "turns": ["Describe a harbour at dawn in two sentences."]},
    {"question_id": 5, "category": "math", "turns": ["Is 91 a prime number? Explain."]},
    {"question_id": 6, "category": "coding", "turns": ["Explain what a hash map is."]},
]

MAX_TOKENS = 16


def _bench(server: Any, prompts: Path, fmt: str, out: Path, slo: dict[str, float], *extra: str) -> dict[str, Any]:
    args = [
        "bench",
        "--base-url",
        server.base_url,
        "--model",
        SERVED_NAME,
        "--metrics-url",
        server.metrics_url,
        "--api",
        "chat",
        "--prompts",
        str(prompts),
        "--prompt-format",
        fmt,
        "--concurrency",
        "3",
        "--warmup",
        "0",  # the servers are warm; the measured order is one seeded permutation of the items per pass
        "--temperature",
        "0",
        "--max-tokens",
        str(MAX_TOKENS),
        "--slo",
        ",".join(f"{k}={v}" for k, v in slo.items()),
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def _values_ms(r: dict[str, Any]) -> dict[str, float | None]:
    """A successful request's values by the stated definitions: ITL is its own p95 per-token ITL (numpy's linear
    interpolation; a gap before a chunk of n tokens counts n times, divided by n), TPOT (E2E - TTFT) / (tokens - 1);
    None where the request has no such value."""
    times, tokens, n = r["chunk_times_s"], r["chunk_tokens"], r["output_tokens"]
    itl = [(times[i] - times[i - 1]) / tokens[i] for i in range(1, len(times)) for _ in range(tokens[i])]
    return {
        "ttft_ms": r["ttft_s"] * 1000,
        "e2e_ms": r["e2e_s"] * 1000,
        "tpot_ms": (r["e2e_s"] - r["ttft_s"]) / (n - 1) * 1000 if n >= 2 else None,
        "itl_ms": float(np.percentile(itl, 95)) * 1000 if itl else None,
    }


def _recompute(records: list[dict[str, Any]], slo: dict[str, float]) -> tuple[int, float, float, dict[str, int]]:
    """(met, attainment, goodput, missed_by): a successful request meets the SLOs when each value it has is at or
    under its bound; attainment over all requests; goodput over the first send to the last response end."""
    met, missed = 0, Counter[str]()
    for r in records:
        if not r["ok"]:
            continue
        values = _values_ms(r)
        misses = [k for k, bound in slo.items() if (v := values[k]) is not None and v > bound]
        met += not misses
        missed.update(misses)
    window = max(r["sent_s"] + (r["stream_end_s"] or r["e2e_s"] or 0.0) for r in records) - min(r["sent_s"] for r in records)
    return met, met / len(records), met / window, dict(missed)


def _assert_goodput_and_server_tokens(summary: dict[str, Any], records: list[dict[str, Any]], slo: dict[str, float]) -> None:
    assert summary["errors"] == 0 and summary["requests"] == len(records)
    got = summary["slo"]
    assert {k: v for k, v in got["slo"].items() if v is not None} == slo
    met, attainment, goodput, missed = _recompute(records, slo)
    assert (got["met"], got["missed_by"]) == (met, missed)
    assert got["attainment"] == pytest.approx(attainment, rel=1e-12)
    assert got["goodput"] == pytest.approx(goodput, rel=1e-9)
    # the server's token counts: usage on every request, and its generation counter over the run agrees
    assert summary["token_sources"] == {"server_usage": len(records)}
    for r in records:
        assert r["token_source"] == "server_usage" and 0 < r["output_tokens"] <= MAX_TOKENS
        assert sum(r["chunk_tokens"]) == r["output_tokens"] and r["prompt_tokens"] > 0
    assert summary["server_generation_tokens"] == sum(r["output_tokens"] for r in records) == summary["output_tokens"]


def test_sharegpt_and_spec_bench_segments_and_goodput_from_the_records(vllm_servers: dict[str, Any], tmp_path: Path) -> None:
    """13-18 s on 2 cores (30 requests of 16 tokens at concurrency 3; the servers already up)."""
    server = vllm_servers["baseline"]

    # ShareGPT, every assistant turn: c1 before its first and its second answer, c2; the empty one skipped
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(json.dumps(CONVERSATIONS))
    slo1 = {"ttft_ms": 2000.0, "itl_ms": 200.0}
    s1 = _bench(
        server,
        sharegpt,
        "sharegpt",
        tmp_path / "sharegpt-run",
        slo1,
        "--turns",
        "all",
        "--num-requests",
        "12",
    )
    r1 = _records(tmp_path / "sharegpt-run")
    assert s1["segments"] == {"default": 12}
    assert Counter(r["item"] for r in r1) == {0: 4, 1: 4, 2: 4}
    run = json.loads((tmp_path / "sharegpt-run" / "run.json").read_text())
    assert run["prompt_count"] == 3 and run["prompt_generator"]["skipped_records"] == 1
    prompt_tokens = {i: {r["prompt_tokens"] for r in r1 if r["item"] == i} for i in range(3)}
    assert all(len(v) == 1 for v in prompt_tokens.values()), prompt_tokens  # the server counts a prompt alike each time
    # the second turn carries the conversation so far: the first turn, the answer and the new question
    assert min(prompt_tokens[1]) > min(prompt_tokens[0]) + 10, prompt_tokens
    _assert_goodput_and_server_tokens(s1, r1, slo1)

    # Spec-Bench: the categories become segments; SLOs at the first run's medians so that some requests miss
    # them (seen: 4 of 18 met; 4 over TTFT, 13 over ITL, 4 over E2E)
    questions = tmp_path / "question.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    first = [_values_ms(r) for r in r1]
    slo2 = {k: round(float(np.median([v[k] for v in first if v[k] is not None])), 3) for k in ("ttft_ms", "itl_ms", "e2e_ms")}
    slo2["tpot_ms"] = 1000.0
    s2 = _bench(server, questions, "spec-bench", tmp_path / "spec-bench-run", slo2, "--num-requests", "18")
    r2 = _records(tmp_path / "spec-bench-run")
    assert s2["segments"] == {"writing": 6, "math": 6, "coding": 6}
    for r in r2:  # each request's segment is its question's category
        assert r["segment"] == QUESTIONS[r["index"]]["category"]
    _assert_goodput_and_server_tokens(s2, r2, slo2)
