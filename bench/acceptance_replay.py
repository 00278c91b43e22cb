"""Offline replay speed: specguard's n-gram and suffix proposers vs vLLM's and Arctic Inference's own, step by step.

Both replay the same tokenized requests, in one run, with the same greedy
verification loop (vllm-facts.md section 5: draft from the accepted context,
accept the common prefix, advance by accepted + 1). specguard uses its
replay (the candidate places of a whole logged request found once, the proposal inlined in the loop);
vLLM's ``_find_longest_matched_ngram_and_propose_tokens``
(numba, JIT-compiled before timing) is called with a view of one preallocated
int32 buffer per request, the way vLLM's runner passes ``token_ids_cpu``. The
draft and acceptance totals must agree, or the speed comparison is void.
Prints output tokens replayed per second for both and the ratio.

With ``--method suffix`` the same requests go through one shared suffix cache each
(replay_suffix, as assess runs it): specguard's pure-Python cache and Arctic
Inference's C++ ``SuffixDecodingCache`` (the build scripts/setup.sh makes) driven
as vLLM drives it; the replay totals must be equal, and an untimed pass of
proposers/differential compares the two drafts at every step.

Not a test: the figures depend on the machine. Usage:
    .venv/bin/python bench/acceptance_replay.py [--log LOG | --text DOC] [--tokenizer DIR] [--requests 400]
        [--method ngram|suffix] [--depth 24]
Without --log, a log is synthesized: prompts of 200-2000 tokens, 256 output tokens each, half of them copying
spans of their prompt (extraction) and half not (open chat).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specguard.embedded.arctic_suffix import BUILD_HINT, import_arctic_cache
from specguard.embedded.runtime import ensure_runtime
from specguard.proposers import SuffixCache, SuffixParams, replay_suffix
from specguard.proposers.arctic import ArcticSuffixCache
from specguard.proposers.differential import drive
from specguard.proposers.replay import ReplayStats, replay_ngram
from specguard.proposers.suffix import fewer_gc_collections

VLLM_SIDE = r"""
import json, sys, time
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as propose

data = json.load(open(sys.argv[1]))
lo, hi, k, mml, repeats = data["min_n"], data["max_n"], data["k"], data["max_model_len"], data["repeats"]
reqs = [(np.array(p + o, dtype=np.int32), len(p), len(o)) for p, o in data["requests"]]
propose(np.arange(64, dtype=np.int32) % 7, lo, hi, mml, k)  # JIT-compile outside the timing

def run():
    drafts = draft_tokens = accepted = out_tokens = 0
    for seq, plen, olen in reqs:
        out_tokens += olen
        end = plen + olen
        pos = plen + 1
        while pos < end:
            d = propose(seq[:pos], lo, hi, mml, k)
            a = 0
            if len(d):
                n = min(len(d), end - pos)
                while a < n and d[a] == seq[pos + a]:
                    a += 1
                drafts += 1; draft_tokens += len(d); accepted += a
            pos += a + 1
    return drafts, draft_tokens, accepted, out_tokens

best = None
for _ in range(repeats):
    t = time.perf_counter(); totals = run(); dt = time.perf_counter() - t
    best = dt if best is None else min(best, dt)
print(json.dumps({"seconds": best, "drafts": totals[0], "draft_tokens": totals[1], "accepted": totals[2],
                  "output_tokens": totals[3]}))
"""


def synthetic_requests(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(32000) for _ in range(rng.randint(200, 2000))]
        output: list[int] = []
        while len(output) < 256:
            if i % 2 == 0:  # extraction: copy spans of the prompt
                s = rng.randrange(len(prompt))
                output += prompt[s : s + rng.randint(4, 24)]
            else:
                output.append(rng.randrange(32000))
        out.append((prompt, output[:256]))
    return out


def text_requests(text: Path, tokenizer: Path, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Natural text: prompts are windows of a document, outputs half re-read the prompt's region, half elsewhere."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    ids = tok.encode(text.read_text()).ids
    rng = random.Random(seed)
    out = []
    for i in range(n):
        start = rng.randrange(len(ids) - 1400)
        prompt = ids[start : start + rng.randint(200, 1000)]
        begin = start + rng.randint(0, 400) if i % 2 == 0 else rng.randrange(len(ids) - 300)
        out.append((prompt, ids[begin : begin + 256]))
    return out


def logged_requests(log: Path, tokenizer: Path) -> list[tuple[list[int], list[int]]]:
    from specguard.workload.importers import read_log
    from specguard.workload.tokenize import LocalTokenizer

    tok = LocalTokenizer(tokenizer)
    out = []
    for entry in read_log(log):
        output = tok.output_ids(entry)
        if output:
            out.append((tok.prompt_ids(entry), output))
    return out


def _suffix_run(make: Callable[[], Any], reqs: list[tuple[list[int], list[int]]], repeats: int) -> tuple[float, ReplayStats]:
    """Best time of ``repeats`` replays of all requests through one fresh cache each."""
    best, total = float("inf"), ReplayStats()
    for _ in range(repeats):
        cache = make()
        t = time.perf_counter()
        total = ReplayStats()
        with fewer_gc_collections():  # as assess runs it
            for i, (prompt, output) in enumerate(reqs):
                total = total.add(replay_suffix(cache, f"r{i}", prompt, output, 1 << 30))
        best = min(best, time.perf_counter() - t)
    return best, total


def suffix_bench(reqs: list[tuple[list[int], list[int]]], depth: int, repeats: int) -> None:
    found = import_arctic_cache()
    if found is None:
        raise SystemExit(f"Arctic Inference's suffix cache is not built: {BUILD_HINT}")
    arctic_cls, where = found
    params = SuffixParams(max_tree_depth=depth)
    ours_s, ours = _suffix_run(lambda: SuffixCache(params), reqs, repeats)
    theirs_s, theirs = _suffix_run(lambda: ArcticSuffixCache(params, arctic_cls), reqs, repeats)
    diff = drive(
        ArcticSuffixCache(params, arctic_cls), SuffixCache(params), [(f"r{i}", p, o) for i, (p, o) in enumerate(reqs)], 1 << 30
    )
    same = ours == theirs and diff.mismatches == 0
    print(
        f"machine: {platform.processor() or platform.machine()}, requests: {len(reqs)}, output tokens: "
        f"{ours.output_tokens}, suffix depth={depth} (vLLM's other defaults), best of {repeats}; Arctic: {where}"
    )
    print(
        f"identical replay totals: {ours == theirs} (drafts {ours.drafts}, draft tokens {ours.draft_tokens}, accepted "
        f"{ours.accepted}; Arctic {theirs.drafts}, {theirs.draft_tokens}, {theirs.accepted}); "
        f"drafts compared step by step: {diff.steps}, differing: {diff.mismatches}"
    )
    print(f"specguard (pure Python): {ours.output_tokens / ours_s:12,.0f} output tokens/s ({ours_s:.3f} s)")
    print(f"Arctic (C++, nanobind) : {theirs.output_tokens / theirs_s:12,.0f} output tokens/s ({theirs_s:.3f} s)")
    print(f"ratio specguard / Arctic: {theirs_s / ours_s:.2f}x")
    if not same:
        raise SystemExit("the two caches disagree: the speed comparison is void")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", type=Path)
    ap.add_argument("--text", type=Path, help="build natural-text requests from this document (needs --tokenizer)")
    ap.add_argument("--tokenizer", type=Path)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-n", type=int, default=2)
    ap.add_argument("--max-n", type=int, default=5)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--method", choices=["ngram", "suffix"], default="ngram")
    ap.add_argument("--depth", type=int, default=24, help="suffix: max_tree_depth")
    args = ap.parse_args()
    if args.log:
        reqs = logged_requests(args.log, args.tokenizer)
    elif args.text:
        reqs = text_requests(args.text, args.tokenizer, args.requests, args.seed)
    else:
        reqs = synthetic_requests(args.requests, args.seed)
    if args.method == "suffix":
        suffix_bench(reqs, args.depth, args.repeats)
        return
    mml = 1 << 30
    runtime = ensure_runtime()

    best = None
    for _ in range(args.repeats):
        t = time.perf_counter()
        total = ReplayStats()
        for prompt, output in reqs:
            total = total.add(replay_ngram(prompt, output, args.min_n, args.max_n, args.k, mml))
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    assert best is not None
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "requests.json"
        data.write_text(
            json.dumps(
                {
                    "requests": reqs,
                    "min_n": args.min_n,
                    "max_n": args.max_n,
                    "k": args.k,
                    "max_model_len": mml,
                    "repeats": args.repeats,
                }
            )
        )
        script = Path(tmp) / "vllm_side.py"
        script.write_text(VLLM_SIDE)
        res = subprocess.run([str(runtime.python), str(script), str(data)], capture_output=True, text=True, check=True)
    theirs = json.loads(res.stdout.strip().splitlines()[-1])
    same = (theirs["drafts"], theirs["draft_tokens"], theirs["accepted"]) == (total.drafts, total.draft_tokens, total.accepted)
    ours_tps = total.output_tokens / best
    theirs_tps = theirs["output_tokens"] / theirs["seconds"]
    print(
        f"machine: {platform.processor() or platform.machine()}, requests: {len(reqs)}, output tokens: "
        f"{total.output_tokens}, n-gram {args.min_n}..{args.max_n} k={args.k}, best of {args.repeats}"
    )
    print(
        f"identical drafts and acceptance: {same} (drafts {total.drafts}, draft tokens {total.draft_tokens}, "
        f"accepted {total.accepted}; vLLM {theirs['drafts']}, {theirs['draft_tokens']}, {theirs['accepted']})"
    )
    print(f"specguard (replay)   : {ours_tps:12,.0f} output tokens/s ({best:.3f} s)")
    print(f"vLLM proposer (numba): {theirs_tps:12,.0f} output tokens/s ({theirs['seconds']:.3f} s)")
    print(f"ratio specguard / vLLM: {ours_tps / theirs_tps:.2f}x")
    if not same:
        raise SystemExit("the two replays disagree: the speed comparison is void")


if __name__ == "__main__":
    main()
