"""specguard's n-gram proposer against vLLM's own, imported from the embedded runtime, on 10,000+ contexts."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from specguard.embedded.models import ModelSet
from specguard.embedded.runtime import VllmRuntime
from specguard.proposers import KnownSequenceDrafts, ngram_propose

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]

VLLM_SIDE = r"""
import json, sys
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as propose
cases = json.load(open(sys.argv[1]))
out = [propose(np.array(c["tokens"], dtype=np.int32), c["min_n"], c["max_n"], c["max_model_len"], c["k"]).tolist()
       for c in cases]
json.dump(out, open(sys.argv[2], "w"))
"""


def _case(tokens: list[int], rng: random.Random, edge: str | None = None) -> dict:
    min_n = rng.randint(1, 4)
    max_n = rng.randint(min_n, 7)
    k = rng.randint(1, 8)
    max_model_len = rng.choice([len(tokens) + rng.randint(0, 3), len(tokens) + 64, 4096])
    case = {"tokens": tokens, "min_n": min_n, "max_n": max_n, "k": k, "max_model_len": max_model_len}
    if edge == "short":
        case["min_n"] = len(tokens) + 1
        case["max_n"] = case["min_n"] + 1
    return case


def _planted(rng: random.Random) -> list[int]:
    """Random tokens with copied spans: what makes prompt lookup hit."""
    vocab = rng.choice([3, 8, 50, 2048, 150_000])
    seq = [rng.randrange(vocab) for _ in range(rng.randint(1, 40))]
    while len(seq) < rng.randint(2, 300):
        if seq and rng.random() < 0.5:
            start = rng.randrange(len(seq))
            seq += seq[start : start + rng.randint(1, 12)]
        else:
            seq += [rng.randrange(vocab) for _ in range(rng.randint(1, 8))]
    return seq


def _contexts(models: ModelSet) -> list[dict]:
    from tokenizers import Tokenizer

    rng = random.Random(20261129)
    cases = [_case(_planted(rng), rng) for _ in range(6000)]
    tok = Tokenizer.from_file(str(models.path("tokenizer") / "tokenizer.json"))
    # natural text with code and tables: the README and the documentation site's pages, then the example prompts
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "prompts.jsonl"]
    text = "".join(p.read_text() for p in pages)
    ids = tok.encode(text).ids
    for _ in range(3000):  # real tokenized text, prefixes of every length
        start = rng.randrange(0, len(ids) - 50)
        cases.append(_case(ids[start : start + rng.randint(1, 600)], rng))
    for _ in range(400):  # edges: shorter than min_n, a match at the very end, k past max_model_len
        seq = _planted(rng)
        cases.append(_case(seq, rng, "short"))
        cases.append(_case(seq + seq[-rng.randint(1, 5) :], rng))
        tail = _case(seq, rng)
        tail["max_model_len"] = len(seq) + rng.randint(-2, 1)
        cases.append(tail)
    cases.append({"tokens": [7], "min_n": 1, "max_n": 1, "k": 3, "max_model_len": 10})
    cases.append({"tokens": [7, 7], "min_n": 1, "max_n": 3, "k": 3, "max_model_len": 10})
    return cases


def test_ngram_proposals_identical_to_vllm(runtime: VllmRuntime, models: ModelSet, tmp_path: Path) -> None:
    cases = _contexts(models)
    assert len(cases) >= 10_000
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    script = tmp_path / "vllm_side.py"
    script.write_text(VLLM_SIDE)
    res = subprocess.run(
        [str(runtime.python), str(script), str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    theirs = json.loads((tmp_path / "out.json").read_text())
    mismatches = [
        (c, t)
        for c, t in zip(cases, theirs)
        if ngram_propose(c["tokens"], c["min_n"], c["max_n"], c["k"], c["max_model_len"]) != t
    ]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ, first: {mismatches[0]}"
    assert sum(1 for t in theirs if t) > len(cases) // 3, "most contexts should draft something"
    # the replay's known-sequence drafts give the same answer for a context that is a prefix of a longer one
    for c, t in zip(cases, theirs):
        longer = c["tokens"] + [3, 1, 4, 1, 5]
        drafts = KnownSequenceDrafts(longer, c["min_n"], c["max_n"], len(c["tokens"]))
        assert drafts.propose_at(len(c["tokens"]), c["k"], c["max_model_len"]) == t
