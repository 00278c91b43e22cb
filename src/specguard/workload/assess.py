"""``specguard assess``: stream a request log, profile it, replay the proposers, judge each segment.

One pass over the log: every request is tokenized as the server saw it,
added to its segment's traffic profile, and replayed under the default
n-gram config, a sweep of n-gram and suffix settings, and (in log order, one
shared cache, as one server would hold it) suffix decoding. Then Gate 1's
rules give each segment a verdict and the best config.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from specguard.embedded.arctic_remote import runtime_arctic_cache
from specguard.embedded.arctic_suffix import BUILD_HINT, import_arctic_cache
from specguard.errors import RuntimeFailure
from specguard.proposers.arctic import ArcticSuffixCache
from specguard.proposers.replay import ReplayStats, replay_ngram_sweep, replay_suffix
from specguard.proposers.suffix import SuffixCache, SuffixParams, fewer_gc_collections
from specguard.workload.candidacy import (
    VERIFY_COST_PER_TOKEN,
    Candidacy,
    LoadFacts,
    decide_candidacy,
    modelled_speedup,
)
from specguard.workload.importers import LogFormat, SkipCounter, read_log
from specguard.workload.logformat import RequestLogEntry
from specguard.workload.profile import ProfileBuilder, TrafficProfile, high_temperature_share
from specguard.workload.tokenize import Tokenize

ASSESS_SCHEMA = "specguard.assess/1"
DEFAULT_NGRAM = (2, 5, 4)  # prompt_lookup_min, prompt_lookup_max, k: the checklist's starting point
NGRAM_LOOKUPS = [(1, 3), (2, 4), (2, 5), (3, 5), (5, 5)]
NGRAM_KS = [2, 4, 6, 8]
SUFFIX_GRID = [(24, 0.1), (16, 0.1), (24, 0.2)]  # (max_tree_depth, min_token_prob); the first is vLLM's default
NO_LIMIT = 1 << 31

LIMITS = [
    "exact for greedy decoding (temperature 0): the replay uses the tokens the target actually produced",
    "at temperature > 0 the logged tokens are one sample: predicted acceptance is an upper bound",
    "draft-model and EAGLE/MTP acceptance cannot be predicted from logs without the model: benchmark them",
    "suffix decoding replays requests one after another in log order; concurrent requests interleave on a server",
    "responses logged as text are re-tokenized, which can differ from the ids the model produced",
    "draft tokens past a request's last logged token cannot be checked: acceptance lies between acceptance_rate "
    "and acceptance_rate_upper",
]
DEFINITIONS = {
    "acceptance_rate": "accepted draft tokens / draft tokens (vLLM's spec_decode counters)",
    "acceptance_rate_upper": "the same if draft tokens past a request's logged end had all matched (vLLM verifies "
    "them against tokens it then cuts off; the log cannot say)",
    "mean_acceptance_length": "1 + accepted / drafts: tokens per drafted step, bonus token included",
    "per_position": "share of drafts whose first i+1 tokens were accepted",
    "draft_fraction": "decode steps that carried a draft / decode steps",
    "step_reduction": "1 - decode steps with speculation / decode steps without (the prefill step excluded)",
    "modelled_speedup": f"baseline steps / (steps + {VERIFY_COST_PER_TOKEN} x draft tokens): ranks configs, "
    "not a latency promise",
}


class ProposerResult(BaseModel):
    method: str
    config: dict[str, Any]
    requests: int
    drafts: int
    draft_tokens: int
    accepted: int
    past_end: int = Field(
        description="draft tokens past the logged end of a request (true accepted is between accepted and accepted + past_end)"
    )
    steps: int
    baseline_steps: int
    acceptance_rate: float | None
    acceptance_rate_upper: float | None
    mean_acceptance_length: float | None
    per_position: list[float]
    draft_fraction: float | None
    step_reduction: float | None
    modelled_speedup: float | None


def _result(method: str, config: dict[str, Any], s: ReplayStats) -> ProposerResult:
    return ProposerResult(
        method=method,
        config=config,
        requests=s.requests,
        drafts=s.drafts,
        draft_tokens=s.draft_tokens,
        accepted=s.accepted,
        past_end=s.past_end,
        steps=s.steps,
        baseline_steps=s.baseline_steps,
        **s.rates(),
        modelled_speedup=modelled_speedup(s.baseline_steps, s.steps, s.draft_tokens),
    )


def ngram_config(min_n: int, max_n: int, k: int) -> dict[str, Any]:
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": min_n, "prompt_lookup_max": max_n}


def suffix_config(depth: int, min_prob: float) -> dict[str, Any]:
    return {
        "method": "suffix",
        "num_speculative_tokens": depth,
        "suffix_decoding_max_tree_depth": depth,
        "suffix_decoding_min_token_prob": min_prob,
    }


class SegmentReport(BaseModel):
    requests: int
    replayed: int = Field(description="requests with a response to replay")
    greedy_requests: int
    profile: TrafficProfile
    ngram: ProposerResult | None = Field(description="the default n-gram config (2..5, k=4)")
    ngram_greedy: ProposerResult | None = Field(description="the same, temperature-0 requests only (exact)")
    suffix: ProposerResult | None
    sweep: list[ProposerResult]
    verdict: str
    reasons: list[str]
    method: str | None
    config: dict[str, Any] | None


class AssessReport(BaseModel):
    schema_version: str = ASSESS_SCHEMA
    log: str
    format: str
    tokenizer: str
    requests: int
    replayed: int
    skipped: dict[str, Any]
    overall: SegmentReport
    segments: dict[str, SegmentReport]
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    limits: list[str] = Field(default_factory=lambda: list(LIMITS))
    definitions: dict[str, str] = Field(default_factory=lambda: dict(DEFINITIONS))
    check_plan: str | None = None
    suffix_cache: str | None = Field(
        default=None,
        description="the suffix cache the replay ran on: Arctic Inference's own SuffixDecodingCache when it "
        "imports, else specguard's re-implementation, which drafts the same (tests/system/test_suffix_exactness.py)",
    )


SuffixEngine = Literal["auto", "arctic", "python"]


def suffix_caches(
    keys: list[tuple[int, float]], engine: SuffixEngine = "auto", python: Path | None = None
) -> tuple[dict[tuple[int, float], SuffixCache | ArcticSuffixCache], str]:
    """One shared cache per (depth, min prob); Arctic's own when ``engine`` allows and it is there.

    Arctic in ``python``'s environment when one is named (a vLLM virtualenv: through a subprocess); else an
    ``arctic_inference`` this interpreter imports, or specguard's build of it; else the embedded vLLM
    runtime's, through a subprocess; else specguard's pure-Python cache, which drafts the same.
    """
    found = None
    if engine != "python":
        found = runtime_arctic_cache(python) if python is not None else import_arctic_cache() or runtime_arctic_cache()
    if engine == "arctic" and found is None:
        raise RuntimeFailure(f"Arctic Inference's suffix cache does not import: {BUILD_HINT}")
    params = {key: SuffixParams(max_tree_depth=key[0], min_token_prob=key[1]) for key in keys}
    if found is not None:
        cls, where = found
        return {k: ArcticSuffixCache(p, cls) for k, p in params.items()}, f"Arctic Inference SuffixDecodingCache ({where})"
    return {k: SuffixCache(p) for k, p in params.items()}, "specguard's pure-Python suffix cache (exact to Arctic's)"


class _Segment:
    def __init__(self, sweep: bool):
        self.profile = ProfileBuilder()
        self.requests = self.replayed = self.greedy = 0
        self.default_greedy = ReplayStats()
        self.suffix: dict[tuple[int, float], ReplayStats] = {}
        self.ngram: dict[tuple[int, int, int], ReplayStats] = {}
        self.sweep = sweep

    def add(
        self,
        entry: RequestLogEntry,
        prompt: list[int],
        output: list[int] | None,
        t0: float | None,
        caches: dict[tuple[int, float], SuffixCache | ArcticSuffixCache],
        req_id: str,
        max_model_len: int,
        replay: bool = True,
    ) -> dict[str, ReplayStats]:
        """Add one request; returns its replays under the default n-gram and suffix configs."""
        self.requests += 1
        temp = entry.sampling.temperature
        start = entry.timestamp.timestamp() - t0 if entry.timestamp is not None and t0 is not None else None
        e2e = entry.timings.e2e_s if entry.timings else None
        self.profile.add(start, e2e, temp, entry.sampling.top_p, len(prompt), len(output) if output is not None else None)
        mine: dict[str, ReplayStats] = {}
        if output is None:
            return mine
        self.replayed += 1
        self.greedy += temp == 0
        if not replay:
            return mine
        lookups = NGRAM_LOOKUPS if self.sweep else [DEFAULT_NGRAM[:2]]
        ks = NGRAM_KS if self.sweep else [DEFAULT_NGRAM[2]]
        for lo, hi in lookups:
            for k, stats in replay_ngram_sweep(
                prompt, output, lo, hi, sorted(set(ks) | {DEFAULT_NGRAM[2]}), max_model_len
            ).items():
                key = (lo, hi, k)
                self.ngram[key] = self.ngram.get(key, ReplayStats()).add(stats)
                if key == DEFAULT_NGRAM:
                    mine["ngram"] = stats
                    if temp == 0:
                        self.default_greedy = self.default_greedy.add(stats)
        for skey, cache in caches.items():
            stats = replay_suffix(cache, req_id, prompt, output, max_model_len)
            self.suffix[skey] = self.suffix.get(skey, ReplayStats()).add(stats)
            if skey == SUFFIX_GRID[0]:
                mine["suffix"] = stats
        return mine

    def report(self, load: LoadFacts) -> SegmentReport:
        profile = self.profile.build()
        ngram_results = [_result("ngram", ngram_config(*key), s) for key, s in sorted(self.ngram.items())]
        suffix_results = [_result("suffix", suffix_config(*key), s) for key, s in self.suffix.items()]
        sweep = ngram_results + suffix_results
        ranked = [r for r in sweep if r.modelled_speedup is not None and r.drafts]
        best = max(ranked, key=lambda r: r.modelled_speedup or 0.0) if ranked else None
        decision: Candidacy = decide_candidacy(
            best.step_reduction if best else None,
            high_temperature_share(profile.temperature_mix),
            load,
            best.method if best else None,
            best.config if best else None,
            replayed=self.replayed,
        )
        default_suffix = self.suffix.get(SUFFIX_GRID[0])
        return SegmentReport(
            requests=self.requests,
            replayed=self.replayed,
            greedy_requests=self.greedy,
            profile=profile,
            ngram=_result("ngram", ngram_config(*DEFAULT_NGRAM), self.ngram.get(DEFAULT_NGRAM, ReplayStats()))
            if self.replayed
            else None,
            ngram_greedy=_result("ngram", ngram_config(*DEFAULT_NGRAM), self.default_greedy) if self.greedy else None,
            suffix=_result("suffix", suffix_config(*SUFFIX_GRID[0]), default_suffix) if default_suffix else None,
            sweep=sweep if self.sweep else [],
            verdict=decision.verdict,
            reasons=decision.reasons,
            method=decision.method,
            config=decision.config,
        )


def segment_of(entry: RequestLogEntry, rules: list[tuple[str, re.Pattern[str]]]) -> str:
    if entry.segment:
        return entry.segment
    text = entry.prompt_text()
    for name, pattern in rules:
        if pattern.search(text):
            return name
    return "default"


def assess(
    log: Path,
    tokenizer: Tokenize,
    tokenizer_name: str,
    fmt: LogFormat = "auto",
    skip_bad: bool = False,
    rules: list[tuple[str, re.Pattern[str]]] | None = None,
    sweep: bool = True,
    suffix: bool = True,
    max_model_len: int = NO_LIMIT,
    load: LoadFacts | None = None,
    progress: Callable[[int, int], None] = lambda _read, _replayed: None,
    collect: list[dict[str, Any]] | None = None,
    collect_max: int = 200,
    requests_out: Path | None = None,
    suffix_engine: SuffixEngine = "auto",
    arctic_python: Path | None = None,
) -> AssessReport:
    """Assess one log. ``collect`` receives the first ``collect_max`` requests as bench prompt items;
    ``requests_out`` gets one JSON line per request with its own replay under the default configs;
    ``progress`` is told, after each request, how many were read and how many replayed."""
    skipped = SkipCounter() if skip_bad else None
    keys = SUFFIX_GRID if sweep else SUFFIX_GRID[:1]
    caches, cache_name = suffix_caches(keys, suffix_engine, arctic_python) if suffix else ({}, None)
    segments: dict[str, _Segment] = {}
    overall = _Segment(sweep=False)
    t0: float | None = None
    prompt_total = output_total = outputs = 0
    per_request = requests_out.open("w") if requests_out is not None else None
    try:
        with fewer_gc_collections():  # suffix trees: millions of small lists (proposers/suffix.py)
            for n, entry in enumerate(read_log(log, fmt, skipped)):
                if t0 is None and entry.timestamp is not None:
                    t0 = entry.timestamp.timestamp()
                prompt = tokenizer.prompt_ids(entry)
                output = tokenizer.output_ids(entry)
                name = segment_of(entry, rules or [])
                seg = segments.setdefault(name, _Segment(sweep))
                if collect is not None and len(collect) < collect_max:
                    collect.append(entry.as_bench_item(len(output) if output else None, name))
                mine = seg.add(entry, prompt, output, t0, caches, f"{n}", max_model_len)
                overall.add(entry, prompt, output, t0, {}, f"{n}", max_model_len, replay=False)
                prompt_total += len(prompt)
                if output is not None:
                    output_total += len(output)
                    outputs += 1
                if per_request is not None:
                    per_request.write(
                        json.dumps(
                            {
                                "request": n,
                                "id": entry.id,
                                "segment": name,
                                "prompt_tokens": len(prompt),
                                "output_tokens": len(output) if output is not None else None,
                                **{
                                    m: {
                                        "drafts": st.drafts,
                                        "draft_tokens": st.draft_tokens,
                                        "accepted": st.accepted,
                                        "steps": st.steps,
                                        **st.rates(),
                                    }
                                    for m, st in mine.items()
                                },
                            }
                        )
                        + "\n"
                    )
                progress(n + 1, outputs)  # requests read, and replayed (those with a response)
    finally:
        if per_request is not None:
            per_request.close()
    for seg in segments.values():  # replays belong to segments; the overall view sums them
        overall.default_greedy = overall.default_greedy.add(seg.default_greedy)
        overall.ngram[DEFAULT_NGRAM] = overall.ngram.get(DEFAULT_NGRAM, ReplayStats()).add(
            seg.ngram.get(DEFAULT_NGRAM, ReplayStats())
        )
        for key, stats in seg.suffix.items():
            overall.suffix[key] = overall.suffix.get(key, ReplayStats()).add(stats)
    load = _with_traffic(load or LoadFacts(), overall.profile.build())
    return AssessReport(
        log=str(log),
        format=fmt,
        tokenizer=tokenizer_name,
        requests=overall.requests,
        replayed=overall.replayed,
        skipped={"count": skipped.count, "by_reason": skipped.by_reason, "examples": skipped.examples}
        if skipped
        else {"count": 0},
        overall=overall.report(load),
        segments={k: s.report(load) for k, s in sorted(segments.items())},
        mean_prompt_tokens=prompt_total / overall.requests if overall.requests else None,
        mean_output_tokens=output_total / outputs if outputs else None,
        suffix_cache=cache_name,
    )


def _with_traffic(load: LoadFacts, profile: TrafficProfile) -> LoadFacts:
    """The server's load is the whole log's: every segment is judged against it."""
    return load.model_copy(
        update={"peak_rps": profile.rate.per_minute_peak if profile.rate else None, "peak_concurrency": profile.concurrency.peak}
    )
