"""Two bench runs, baseline and candidate, compared metric by metric with intervals. Pure.

Two runs are comparable only when they differ in nothing but the arm: the
same prompts, load shape, sampling, API and model name. The server (URL,
version, speculative config) is what is being compared.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, Field
from scipy import stats

from specguard.analysis.ab_statistics import RatioResult, Repetition, compare_percentile
from specguard.analysis.defaults import DEFAULT_RESAMPLES, DEFAULT_TARGET_CHANGE, MIN_TAIL_SAMPLES
from specguard.analysis.definitions import COMPARISON_DEFINITIONS
from specguard.analysis.request_metrics import per_token_itl, tpot
from specguard.analysis.slo import compare_goodput
from specguard.results.foreign.run import LoadedRun
from specguard.results.models import RequestRecord, RunInfo

COMPARE_SCHEMA = "specguard.compare/1"
METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}


class Comparison(BaseModel):
    schema_version: str = COMPARE_SCHEMA
    comparable: bool
    differences: list[str]
    baseline: str
    candidate: str
    ttft_ms: dict[str, RatioResult] | None = None
    itl_ms: dict[str, RatioResult] | None = None
    tpot_ms: dict[str, RatioResult] | None = None
    e2e_ms: dict[str, RatioResult] | None = None
    goodput: RatioResult | None = Field(default=None, description="candidate / baseline goodput, when both runs share SLOs")
    notes: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list, description="what a foreign run's format could not carry")
    definitions: dict[str, str] = Field(default_factory=lambda: dict(COMPARISON_DEFINITIONS))

    @property
    def metrics(self) -> dict[str, dict[str, RatioResult]]:
        return {m: v for m in METRICS if (v := getattr(self, m)) is not None}


# A prompt set as a run records it: its source, the content hash of a file, a synthetic set's generator.
PromptIdentity = tuple[str, str | None, dict[str, str | int] | None]


def prompt_difference(a: PromptIdentity, b: PromptIdentity) -> str | None:
    """Whether two runs sent the same prompts, by content: the hash, else the generator, else the source's name."""
    (source_a, sha_a, gen_a), (source_b, sha_b, gen_b) = a, b
    if sha_a is not None and sha_b is not None:
        # The content decides; the same prompts under another path are the same prompts.
        if sha_a != sha_b:
            return f"prompt content: {source_a} (sha256 {sha_a[:12]}) vs {source_b} (sha256 {sha_b[:12]})"
        return None
    if gen_a is not None or gen_b is not None:
        return f"prompt generator: {gen_a!r} vs {gen_b!r}" if gen_a != gen_b else None
    if source_a != source_b:
        return f"prompt_source: {source_a!r} vs {source_b!r} (no content hash recorded)"
    return None


def differences(a: RunInfo, b: RunInfo) -> list[str]:
    """What, besides the arm, differs between two runs."""
    prompts = prompt_difference(
        (a.prompt_source, a.prompt_sha256, a.prompt_generator), (b.prompt_source, b.prompt_sha256, b.prompt_generator)
    )
    out = [prompts] if prompts is not None else []
    for field in ("prompt_count", "api", "model"):
        va, vb = getattr(a, field), getattr(b, field)
        if va != vb:
            out.append(f"{field}: {va!r} vs {vb!r}")
    la, lb = a.load.model_dump(), b.load.model_dump()
    out += [f"load.{k}: {la[k]!r} vs {lb[k]!r}" for k in la if la[k] != lb[k]]
    sa, sb = a.sampling.model_dump(), b.sampling.model_dump()
    out += [f"sampling.{k}: {sa[k]!r} vs {sb[k]!r}" for k in sa if sa[k] != sb[k]]
    return out


def metric_values(records: Sequence[RequestRecord], metric: str) -> Repetition:
    """Per successful request, its values of ``metric`` in milliseconds (several for per-token ITL)."""
    out: list[list[float]] = []
    for r in records:
        if not r.ok:
            continue
        if metric == "ttft_ms" and r.ttft_s is not None:
            out.append([r.ttft_s * 1000])
        elif metric == "e2e_ms" and r.e2e_s is not None:
            out.append([r.e2e_s * 1000])
        elif metric == "tpot_ms":
            v = tpot(r.ttft_s, r.e2e_s, r.output_tokens)
            if v is not None:
                out.append([v * 1000])
        elif metric == "itl_ms":
            itl = per_token_itl(r.chunk_times_s, r.chunk_tokens)
            if itl:
                out.append([x * 1000 for x in itl])
    return out


def compare_repetitions(
    base: Sequence[Sequence[RequestRecord]],
    cand: Sequence[Sequence[RequestRecord]],
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    min_tail: int = MIN_TAIL_SAMPLES,
    target_change: float = DEFAULT_TARGET_CHANGE,
) -> dict[str, dict[str, RatioResult]]:
    """Every metric x percentile: candidate/baseline with interval, over one or more repetitions per arm."""
    out: dict[str, dict[str, RatioResult]] = {}
    for metric in METRICS:
        b = [metric_values(rep, metric) for rep in base]
        c = [metric_values(rep, metric) for rep in cand]
        out[metric] = {}
        for name, q in QUANTILES.items():
            out[metric][name] = compare_percentile(
                b, c, q, seed=seed, resamples=resamples, min_tail=min_tail, target_change=target_change
            )
    return out


def throughput_ratio(base: Sequence[float], cand: Sequence[float]) -> RatioResult:
    """candidate/baseline of mean output tokens/s over repetitions, t-interval on paired log-ratios.

    Throughput is a property of a whole run, not of a request, so the repetitions
    are the samples: two or more per arm are needed.
    """
    pairs = min(len(base), len(cand))
    mb = sum(base) / len(base) if base else math.nan
    mc = sum(cand) / len(cand) if cand else math.nan
    ratio = mc / mb if mb and mb > 0 else math.nan
    lo = hi = math.nan
    if pairs >= 2 and all(x > 0 for x in list(base[:pairs]) + list(cand[:pairs])):
        logs = [math.log(c / b) for b, c in zip(base[:pairs], cand[:pairs])]
        mean = sum(logs) / pairs
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (pairs - 1))
        half = float(stats.t.ppf(0.975, pairs - 1)) * sd / math.sqrt(pairs)
        lo, hi = math.exp(mean - half), math.exp(mean + half)
    return RatioResult(
        baseline=mb,
        candidate=mc,
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        n_baseline=len(base),
        n_candidate=len(cand),
        enough_samples=pairs >= 2,
        more_requests_needed=0,
        mann_whitney_p=None,
        prob_candidate_lower=None,
        repetition_spread_widened=False,
    )


def compare_runs(
    base_name: str,
    base: tuple[RunInfo, Sequence[RequestRecord]],
    cand_name: str,
    cand: tuple[RunInfo, Sequence[RequestRecord]],
    seed: int = 0,
) -> Comparison:
    diffs = differences(base[0], cand[0])
    for name, (_, records) in ((base_name, base), (cand_name, cand)):
        if not any(r.ok for r in records):
            diffs.append(f"{name}: no successful request (nothing to compare)")
    if diffs:
        return Comparison(comparable=False, differences=diffs, baseline=base_name, candidate=cand_name)
    m = compare_repetitions([base[1]], [cand[1]], seed=seed)
    goodput, notes = _goodput(base, cand, seed)
    return Comparison(
        comparable=True,
        differences=[],
        baseline=base_name,
        candidate=cand_name,
        ttft_ms=m["ttft_ms"],
        itl_ms=m["itl_ms"],
        tpot_ms=m["tpot_ms"],
        e2e_ms=m["e2e_ms"],
        goodput=goodput,
        notes=notes,
    )


def _goodput(
    base: tuple[RunInfo, Sequence[RequestRecord]], cand: tuple[RunInfo, Sequence[RequestRecord]], seed: int
) -> tuple[RatioResult | None, list[str]]:
    """Goodput is compared only against one set of SLOs: the same in both runs' run.json."""
    sb, sc = base[0].slo, cand[0].slo
    if sb is None and sc is None:
        return None, []
    if sb != sc:
        shown = [s.given() if s is not None else "none" for s in (sb, sc)]
        return None, [f"no goodput comparison: the runs' SLOs differ ({shown[0]} vs {shown[1]})"]
    assert sb is not None  # equal and not both None
    return compare_goodput([base[1]], [cand[1]], sb, seed=seed), []


# Two tools count prompt tokens differently (a BOS token, a chat template's few tokens): foreign runs whose mean
# prompt length differs by more than this share are not the same prompts.
PROMPT_LENGTH_TOLERANCE = 0.02
_LOAD_KEYS = ("kind", "rate", "burstiness", "concurrency", "burst", "num_requests")


def foreign_differences(a: LoadedRun, b: LoadedRun) -> tuple[list[str], list[str]]:
    """Differences and warnings between runs of which at least one another tool wrote.

    Such a file has no prompt hash and no sampling values: prompts are matched by count and by prompt token
    counts (equal as multisets, or means within 2 %), sampling is not checked, and the load by its shape only.
    """
    diffs: list[str] = []
    warns: list[str] = []
    for field in ("prompt_count", "api", "model"):
        va, vb = getattr(a.info, field), getattr(b.info, field)
        if va != vb and "unknown" not in (va, vb):
            diffs.append(f"{field}: {va!r} vs {vb!r}")
    la, lb = a.info.load.model_dump(), b.info.load.model_dump()
    diffs += [f"load.{k}: {la[k]!r} vs {lb[k]!r}" for k in _LOAD_KEYS if la[k] != lb[k]]
    diff, warn = prompt_token_difference(a.records, b.records)
    return diffs + ([diff] if diff else []), warns + ([warn] if warn else [])


def prompt_token_difference(a: Sequence[RequestRecord], b: Sequence[RequestRecord]) -> tuple[str | None, str | None]:
    """(difference, warning) between the prompt token counts of two sets of requests, neither with prompt text.

    The same prompts give the same counts in the same proportions (a run of 3 x N requests over the prompts
    of a run of N); else means within ``PROMPT_LENGTH_TOLERANCE`` are taken for two tokenizations (a warning)
    and beyond it for other prompts (a difference).
    """
    pa = sorted(r.prompt_tokens for r in a if r.prompt_tokens is not None)
    pb = sorted(r.prompt_tokens for r in b if r.prompt_tokens is not None)
    if not (pa and pb):
        return None, "prompt token counts missing on one side: the prompts could not be matched"
    if _same_proportions(pa, pb):
        return None, None
    ma, mb = sum(pa) / len(pa), sum(pb) / len(pb)
    if abs(ma - mb) > PROMPT_LENGTH_TOLERANCE * max(ma, mb):
        return f"prompt tokens: mean {ma:.1f} vs {mb:.1f} (not the same prompts)", None
    return None, f"prompt token counts differ slightly (mean {ma:.1f} vs {mb:.1f}): two tokenizations"


def _same_proportions(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether one multiset of counts is the other repeated a whole number of times."""
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    if len(long) % len(short):
        return False
    times = len(long) // len(short)
    ca, cb = Counter(short), Counter(long)
    return ca.keys() == cb.keys() and all(cb[k] == times * n for k, n in ca.items())


def compare_loaded(base: LoadedRun, cand: LoadedRun, seed: int = 0) -> Comparison:
    """``compare_runs`` for runs of any format; a foreign run's mapping warnings go into the comparison."""
    if base.format == "specguard" and cand.format == "specguard":
        return compare_runs(base.name, (base.info, base.records), cand.name, (cand.info, cand.records), seed=seed)
    diffs, warns = foreign_differences(base, cand)
    warns = [*base.warnings, *cand.warnings, *warns]
    for run in (base, cand):
        if not any(r.ok for r in run.records):
            diffs.append(f"{run.name}: no successful request (nothing to compare)")
    if diffs:
        return Comparison(comparable=False, differences=diffs, baseline=base.name, candidate=cand.name, warnings=warns)
    m = compare_repetitions([base.records], [cand.records], seed=seed)
    return Comparison(
        comparable=True,
        differences=[],
        baseline=base.name,
        candidate=cand.name,
        warnings=warns,
        ttft_ms=m["ttft_ms"],
        itl_ms=m["itl_ms"],
        tpot_ms=m["tpot_ms"],
        e2e_ms=m["e2e_ms"],
    )
