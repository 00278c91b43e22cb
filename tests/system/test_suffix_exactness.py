"""specguard's suffix cache against Arctic Inference's own C++ SuffixDecodingCache, draft for draft, over 10,000+ steps.

Both get the calls vLLM's SuffixDecodingProposer makes (proposers/arctic.py
drives Arctic's cache that way), step by step, several requests in flight;
every draft must be identical. Arctic's cache is the one scripts/setup.sh
builds from the arctic-inference sdist (no torch needed).
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

from specguard.embedded.models import ModelSet
from specguard.embedded.runtime import VllmRuntime
from specguard.proposers import SuffixCache, SuffixParams
from specguard.proposers.arctic import ArcticSuffixCache
from specguard.proposers.differential import DiffResult, drive

ROOT = Path(__file__).resolve().parents[2]
Request = tuple[str, list[int], list[int]]


def _planted(rng: random.Random, n: int, tag: str) -> list[Request]:
    """Random prompts over a small or large vocabulary; outputs copy spans of their prompt or of earlier outputs."""
    vocab = rng.choice([3, 8, 50, 2048, 150_000])
    reqs: list[Request] = []
    for i in range(n):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(0, 120))]
        output: list[int] = []
        target = rng.randint(1, 90)
        while len(output) < target:
            r = rng.random()
            if r < 0.4 and prompt:
                s = rng.randrange(len(prompt))
                output += prompt[s : s + rng.randint(1, 20)]
            elif r < 0.7 and reqs:
                earlier = rng.choice(reqs)[2]
                s = rng.randrange(len(earlier))
                output += earlier[s : s + rng.randint(1, 30)]
            else:
                output += [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
        reqs.append((f"{tag}-{i}", prompt, output[:target]))
    return reqs


def _natural(rng: random.Random, ids: list[int], n: int, tag: str) -> list[Request]:
    """Real tokenized text: a prompt window, an output that re-reads it half the time, elsewhere otherwise."""
    reqs: list[Request] = []
    for i in range(n):
        start = rng.randrange(len(ids) - 400)
        prompt = ids[start : start + rng.randint(1, 200)]
        begin = start + rng.randint(0, 100) if i % 2 == 0 else rng.randrange(len(ids) - 200)
        reqs.append((f"{tag}-{i}", prompt, ids[begin : begin + rng.randint(1, 120)]))
    return reqs


def _edges(rng: random.Random, tag: str) -> list[Request]:
    """Empty and one-token prompts, one-token outputs, runs of one token, and a request id used twice."""
    reqs: list[Request] = [
        (f"{tag}-empty", [], [5, 5, 5, 5, 5, 5]),
        (f"{tag}-one", [5], [5]),
        (f"{tag}-run", [7] * 40, [7] * 70),
        (f"{tag}-alt", [1, 2] * 30, [1, 2] * 40 + [3]),
        (f"{tag}-short", [1, 2, 3], [1]),
    ]
    reqs += _planted(rng, 6, tag)
    reqs.append((f"{tag}-run", [7, 8] * 10, [7, 8, 7] * 10))  # the same id again: its cached response goes first
    return reqs


def _workloads(ids: list[int]) -> list[tuple[str, list[Request], int]]:
    """(name, requests, max_model_len); some requests end exactly at max_model_len, some drafts are cut by it."""
    rng = random.Random(20261202)
    out: list[tuple[str, list[Request], int]] = []
    for w in range(3):
        reqs = _planted(rng, 14, f"planted{w}")
        out.append((f"planted{w}", reqs, 1 << 30))
    reqs = _natural(rng, ids, 14, "text")
    out.append(("text", reqs, 1 << 30))
    edges = _edges(rng, "edge")
    out.append(("edges", edges, 1 << 30))
    limit = max(len(p) + len(o) for _, p, o in edges)
    out.append(("edges at max_model_len", [(f"{r}-mml", p, o[: limit - len(p)]) for r, p, o in edges], limit))
    cut = 90  # prompts up to 89 tokens: some requests start at the limit, most reach it
    tight = [(r, p[: cut - 1], o) for r, p, o in _planted(rng, 12, "tight")]
    out.append((f"planted at max_model_len {cut}", [(r, p, o[: max(1, cut - len(p))]) for r, p, o in tight], cut))
    return out


def test_suffix_drafts_identical_to_arctic(arctic_suffix_cache: Any, models: ModelSet) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(models.path("tokenizer") / "tokenizer.json"))
    # natural text with code and tables: the README and the documentation site's pages, then the example prompts
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "prompts.jsonl"]
    ids = tok.encode("".join(p.read_text() for p in pages)).ids
    workloads = _workloads(ids)
    total = DiffResult()
    failures: list[str] = []
    settings = itertools.product([24, 64], [1.0, 2.0], [0.1, 0.5], [(10_000, 1), (3, 4), (1, 2), (0, 3)])
    for depth, factor, min_prob, (cached, in_flight) in settings:
        params = SuffixParams(max_tree_depth=depth, max_spec_factor=factor, min_token_prob=min_prob, max_cached_requests=cached)
        arctic, ours = ArcticSuffixCache(params, arctic_suffix_cache), SuffixCache(params)
        for name, reqs, max_model_len in workloads:  # one pair of caches across workloads: the global tree carries over
            res = drive(arctic, ours, reqs, max_model_len, in_flight)
            total.steps += res.steps
            total.drafts += res.drafts
            total.mismatches += res.mismatches
            if res.mismatches:
                where = f"depth {depth} factor {factor} min_prob {min_prob} cached {cached}, {name}"
                failures.append(f"{where}: {res.first_mismatch}")
    print(f"suffix exactness: {total.steps} steps, {total.drafts} drafts, {total.mismatches} mismatches")
    assert total.steps >= 10_000
    assert total.drafts >= total.steps // 5  # the workloads do draft: a comparison of empty drafts would prove little
    assert total.mismatches == 0, f"{total.mismatches} of {total.steps} drafts differ:\n" + "\n".join(failures[:10])


class _Ids:
    """Logged token ids as they are."""

    def prompt_ids(self, entry: Any) -> list[int]:
        return list(entry.prompt_token_ids)

    def output_ids(self, entry: Any) -> list[int] | None:
        return list(entry.response.token_ids) if entry.response is not None else None


def test_assess_gives_the_same_numbers_on_arctic_and_on_the_python_cache(
    arctic_suffix_cache: Any, runtime: VllmRuntime, tmp_path: Path
) -> None:
    """Arctic imported here, Arctic in the vLLM runtime's interpreter (a subprocess), and the pure-Python cache."""
    from specguard.workload.assess import assess

    rng = random.Random(7)
    lines = []
    for _, prompt, output in _planted(rng, 60, "log"):
        entry = {
            "schema_version": "specguard.request_log/1",
            "endpoint": "completions",
            "prompt_token_ids": prompt,
            "sampling": {"temperature": 0},
            "response": {"token_ids": output},
        }
        lines.append(json.dumps(entry) + "\n")
    log = tmp_path / "log.jsonl"
    log.write_text("".join(lines))
    on_arctic = assess(log, _Ids(), "ids", suffix_engine="arctic")
    on_python = assess(log, _Ids(), "ids", suffix_engine="python")
    in_runtime = assess(log, _Ids(), "ids", suffix_engine="arctic", arctic_python=runtime.python)
    assert on_arctic.suffix_cache is not None and on_arctic.suffix_cache.startswith("Arctic Inference")
    assert in_runtime.suffix_cache is not None and f"{runtime.python}'s environment (a subprocess)" in in_runtime.suffix_cache
    assert on_python.suffix_cache is not None and on_python.suffix_cache.startswith("specguard's pure-Python")
    assert on_arctic.overall.suffix is not None and on_arctic.overall.suffix.drafts > 0
    same = {"suffix_cache"}
    assert on_arctic.model_dump(exclude=same) == on_python.model_dump(exclude=same)
    assert in_runtime.model_dump(exclude=same) == on_python.model_dump(exclude=same)


def test_assess_with_a_python_lacking_arctic_fails_naming_the_missing_module(models: ModelSet, tmp_path: Path) -> None:
    """``--python`` names an interpreter whose environment has no Arctic: exit 4 with its ImportError, no traceback."""
    import stat
    import sys

    from tests.system.test_cli import specguard

    bare = tmp_path / "python"  # this interpreter without site-packages: arctic_inference cannot import there
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    bare.chmod(bare.stat().st_mode | stat.S_IEXEC)
    entry = {"endpoint": "completions", "prompt": "a b a b a b", "response": {"text": " a b"}}
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(entry) + "\n")
    r = specguard("assess", str(log), "--tokenizer", str(models.path("tokenizer")), "--python", str(bare), "--no-sweep")
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert f"Arctic's suffix cache in {bare} stopped" in r.stderr and "No module named 'arctic_inference'" in r.stderr
    assert "Traceback" not in r.stderr
