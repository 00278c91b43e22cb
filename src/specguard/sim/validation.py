"""The simulator against the embedded vLLM: calibrate on some ``bench`` runs, predict others, score each metric.

``EMBEDDED_LOADS`` is the one list of runs both ``bench/sim_validation.py`` and the integration test make against
the embedded servers: a calibration set (baseline and n-gram at concurrency 1 and 4, which separates the per-KV
from the per-batched-token cost) and predicted runs at loads the fit never saw. ``validate_embedded`` fits a
profile to the first and scores ``predict_run`` on the second; ``render_validation_md`` writes docs/validation.md
from a finished ``ValidationDoc`` (the published series come from ``sim.published``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig
from specguard.results.models import LoadShape, SamplingOverrides
from specguard.sim.calibrate import calibrate
from specguard.sim.from_run import run_workload
from specguard.sim.predict import PREDICTED_METRICS, RunPrediction, predict_run
from specguard.sim.published import SeriesResult
from specguard.sim.step_time import LinearProfile, ModelCost, ProposerCost, draft_profile
from specguard.sizing.catalog import ModelEntry
from specguard.vllm import knowledge as K

ServerKind = Literal["baseline", "ngram", "ngram_k2", "draft_model"]
# synthetic:repetitive at temperature 0 gives n-gram matches on the tiny model (acceptance about 0.95 here);
# 48 tokens keep a run of 24 requests near 10 s on 2 cores.
PROMPTS = "repetitive"
MAX_TOKENS = 48
REQUESTS = 24
WARMUP = 2


class EmbeddedLoad(BaseModel):
    name: str
    server: ServerKind
    kind: Literal["concurrency", "poisson"]
    value: float = Field(description="concurrency, or requests per second")
    role: Literal["calibrate", "predict", "repeat"] = Field(description="repeat: a calibration load measured again")

    @property
    def label(self) -> str:
        return f"concurrency {self.value:g}" if self.kind == "concurrency" else f"Poisson {self.value:g} req/s"


def _load(name: str, server: ServerKind, kind: Literal["concurrency", "poisson"], value: float, role: str) -> EmbeddedLoad:
    return EmbeddedLoad(name=name, server=server, kind=kind, value=value, role=role)  # type: ignore[arg-type]


# Per server, calibration and predicted runs alternate in time: on this shared 2-vCPU machine a server's speed
# drifts by tens of per cent over minutes (below), and a calibration made only of the first runs carries the
# drift into every prediction. The integration test makes the first two servers' runs (``INTEGRATION_LOADS``);
# the bench script adds a higher load, another k, the draft-model server and one repeated run.
EMBEDDED_LOADS = (
    _load("base_c1", "baseline", "concurrency", 1, "calibrate"),
    _load("base_c2", "baseline", "concurrency", 2, "predict"),
    _load("base_c4", "baseline", "concurrency", 4, "calibrate"),
    _load("base_r6", "baseline", "poisson", 6, "predict"),
    _load("base_c8", "baseline", "concurrency", 8, "predict"),
    _load("base_c1_again", "baseline", "concurrency", 1, "repeat"),
    _load("ngram_c1", "ngram", "concurrency", 1, "calibrate"),
    _load("ngram_c2", "ngram", "concurrency", 2, "predict"),
    _load("ngram_c4", "ngram", "concurrency", 4, "calibrate"),
    _load("ngram_r6", "ngram", "poisson", 6, "predict"),
    _load("ngram_c8", "ngram", "concurrency", 8, "predict"),
    _load("ngram_c1_again", "ngram", "concurrency", 1, "repeat"),
    _load("ngram_k2_c1", "ngram_k2", "concurrency", 1, "predict"),
    _load("ngram_k2_c4", "ngram_k2", "concurrency", 4, "predict"),
    _load("draft_c1", "draft_model", "concurrency", 1, "predict"),
    _load("draft_c4", "draft_model", "concurrency", 4, "predict"),
)
INTEGRATION_LOADS = tuple(
    x for x in EMBEDDED_LOADS if x.server in ("baseline", "ngram") and x.value in (1, 2, 4, 6) and x.role != "repeat"
)


# A fresh CPU server's first runs are slow while it compiles kernels for new batch shapes: measured here, a
# baseline at concurrency 1 took 9.2 ms per token as the server's first run and 4.7 ms as its third. A profile
# calibrated on such runs over-predicted every later run by up to 3x. So each server first serves this run,
# up to the largest batch measured, and it is not kept.
WARM_UP = EmbeddedLoad(name="warm_up", server="baseline", kind="concurrency", value=8, role="calibrate")


def bench_config(load: EmbeddedLoad, base_url: str, model: str, out: Path) -> BenchConfig:
    """The ``specguard bench`` run of one load, as the validation makes it."""
    if load.kind == "concurrency":
        shape = LoadShape(kind="concurrency", concurrency=int(load.value), num_requests=REQUESTS, warmup_requests=WARMUP)
    else:
        shape = LoadShape(kind="poisson", rate=load.value, num_requests=REQUESTS, warmup_requests=WARMUP, seed=1)
    return BenchConfig(
        base_url=base_url,
        model=model,
        prompts=synthetic_prompts(PROMPTS, count=REQUESTS + WARMUP, max_tokens=MAX_TOKENS),
        load=shape,
        sampling=SamplingOverrides(temperature=0.0, max_tokens=MAX_TOKENS),
        metrics_url=f"{base_url}/metrics",
        gpu_metrics_url="none",
        out_dir=out,
        scrape_interval_s=0.5,
    )


class PredictedRun(BaseModel):
    load: EmbeddedLoad
    method: str | None
    k: int
    prediction: RunPrediction


class RepeatedRun(BaseModel):
    """One load measured twice on the same server, minutes apart: how far a measurement moves by itself."""

    load: EmbeddedLoad
    first: str
    change: dict[str, float | None] = Field(description="p50 per metric: (again - first) / first")


class EmbeddedValidation(BaseModel):
    calibration_runs: list[str]
    profile: LinearProfile
    fit_median_ape: float
    runs: list[PredictedRun]
    repeats: list[RepeatedRun] = Field(default_factory=list)


class ValidationDoc(BaseModel):
    tool_version: str
    embedded: EmbeddedValidation | None
    published: list[SeriesResult]


# the method each server runs; its k is the run's own, the positions its server's spec-decode counters report
SERVER_METHOD: dict[ServerKind, str | None] = {
    "baseline": None,
    "ngram": "ngram",
    "ngram_k2": "ngram",
    "draft_model": "draft_model",
}


def validate_embedded(
    runs: Sequence[tuple[EmbeddedLoad, Path]], target: ModelEntry | None = None, draft: ModelEntry | None = None
) -> EmbeddedValidation:
    """Fit on the calibration runs, predict the rest; a draft-model run needs both models to scale its proposer."""
    fit_dirs = [d for load, d in runs if load.role == "calibrate"]
    report = calibrate(fit_dirs)
    profile = report.profile
    out: list[PredictedRun] = []
    for load, run_dir in runs:
        if load.role != "predict":
            continue
        work = run_workload(run_dir)
        method = SERVER_METHOD[load.server]
        k = len(work.acceptance or []) if method else 0
        if method and not k:
            raise ValueError(f"{run_dir}: a {method} run without per-position spec-decode counters to take k from")
        proposer = None
        if method == "draft_model":
            if target is None or draft is None:
                raise ValueError("a draft-model run needs the target and draft models to scale the profile")
            proposer = ProposerCost("draft_model", draft_profile(profile, ModelCost.of(target, 1), ModelCost.of(draft, 1)))
        elif method is not None:
            proposer = ProposerCost("ngram")
        lookahead = K.lookahead_slots(method, k) if method else 0
        prediction = predict_run(work, profile, method=method, k=k, proposer=proposer, lookahead=lookahead)
        out.append(PredictedRun(load=load, method=method, k=k, prediction=prediction))
    return EmbeddedValidation(
        calibration_runs=[load.name for load, _ in runs if load.role == "calibrate"],
        profile=profile,
        fit_median_ape=report.error.median_ape,
        runs=out,
        repeats=_repeats(runs),
    )


def _repeats(runs: Sequence[tuple[EmbeddedLoad, Path]]) -> list[RepeatedRun]:
    from specguard.loadgen.run_summary import load_or_recompute_summary

    by_name = {load.name: d for load, d in runs}
    out = []
    for load, again_dir in runs:
        first = load.name.removesuffix("_again")
        if load.role != "repeat" or first not in by_name:
            continue
        a, b = load_or_recompute_summary(by_name[first]), load_or_recompute_summary(again_dir)
        change: dict[str, float | None] = {}
        for m in PREDICTED_METRICS:
            x, y = getattr(a, m).p50, getattr(b, m).p50
            change[m] = round((y - x) / x, 4) if x and y is not None else None
        out.append(RepeatedRun(load=load, first=first, change=change))
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.0f} %"


def _embedded_md(e: EmbeddedValidation) -> list[str]:
    p = e.profile
    lines = [
        "## 1. The embedded vLLM, here",
        "",
        f"Calibrated on {', '.join(e.calibration_runs)} (`synthetic:{PROMPTS}`, temperature 0, {MAX_TOKENS} tokens, "
        f"{REQUESTS} requests each): fixed {p.fixed_s * 1e3:.2f} ms, {p.per_kv_token_s * 1e6:.3f} us per KV token, "
        f"{p.per_batched_token_s * 1e6:.2f} us per batched token; fit median absolute error {e.fit_median_ape * 100:.1f} % "
        "of a step. Every other run below was predicted, never fitted. Error = (predicted - measured) / measured.",
        "",
        "| run | server | load | TTFT p50 | TPOT p50 | ITL p50 | E2E p50 | TPOT p90 | E2E p90 | throughput |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in e.runs:
        err = {(pt.metric, pt.stat): pt.error for pt in r.prediction.points}
        server = r.load.server if not r.method else f"{r.method}, k={r.k}"
        cells = [err.get(key) for key in (("ttft_ms", "p50"), ("tpot_ms", "p50"), ("itl_ms", "p50"), ("e2e_ms", "p50"))]
        cells += [err.get(("tpot_ms", "p90")), err.get(("e2e_ms", "p90")), err.get(("output_tokens_per_s", "mean"))]
        lines.append(f"| {r.load.name} | {server} | {r.load.label} | " + " | ".join(_pct(c) for c in cells) + " |")
    if e.repeats:
        lines += [
            "",
            "The noise floor: the same load on the same server, measured again at the end of its runs "
            "(change of the second from the first):",
            "",
            "| run | again as | TTFT p50 | TPOT p50 | ITL p50 | E2E p50 |",
            "|---|---|---|---|---|---|",
        ]
        for rep in e.repeats:
            cells = [rep.change.get(m) for m in PREDICTED_METRICS]
            lines.append(f"| {rep.first} | {rep.load.name} | " + " | ".join(_pct(c) for c in cells) + " |")
    return [*lines, ""]


def _series_md(r: SeriesResult) -> list[str]:
    s = r.series
    x_name = "QPS" if s.x_axis == "qps" else "batch"
    ratio = (
        "end-to-end latency speed-up (baseline p50 / speculative p50)" if s.ratio == "e2e_speedup" else "output throughput ratio"
    )
    acc = " / ".join(f"{a:.3f}" for a in r.acceptance)
    lines = [
        f"### {s.source}: {s.setting}",
        "",
        f"{s.target} on {s.tensor_parallel_size} x {s.gpu}, vLLM {s.engine.upper()} engine, k = {s.num_speculative_tokens}, "
        f"{s.prompt_len}/{s.output_len} tokens ({s.lengths_source}); {ratio}. Acceptance {acc}: {s.acceptance_rule}"
        + (f"; drafts in {s.draft_fraction:.0%} of steps" if s.draft_fraction < 1 else "")
        + f". Source: {s.cite}.",
        "",
        f"| {x_name} | measured | simulated | error |",
        "|---|---|---|---|",
    ]
    lines += [f"| {p.x:g} | {p.measured:.2f} | {p.simulated:.2f} | {_pct(p.error)} |" for p in r.points]
    if s.x_axis == "qps":
        m = "none" if r.measured_crossover is None else f"QPS {r.measured_crossover:g}"
        sim = "none" if r.simulated_crossover is None else f"QPS {r.simulated_crossover:g}"
        lines += ["", f"Crossover (first measured point at or below 1): measured {m}, simulated {sim}."]
    return [*lines, ""]


# What a reader must know to weigh the numbers above; said once, here.
CAVEATS = (
    "The October 2024 post gives no acceptance rate: each of its series has one parameter (q) fitted to its QPS-1 "
    "point, whose error is therefore 0 by construction; every other point and the crossover are predictions. Its "
    "measured values are read off its figures (about +-0.05).",
    "V0's CPU costs (`sim/step_time.py` `V0Costs`) come from vLLM's own V0 measurements (PR #9298, issue #8370, "
    "the v0.6.0 post), not from the October 2024 post.",
    "A draft or EAGLE pass costs its roofline plus 0.1 ms (`DRAFT_PASS_OVERHEAD_S`). That correction was made after "
    "SpecDecode-Bench's EAGLE-3 batch-1 point came out 1.22x with the step's whole 1.5 ms fixed cost charged per "
    "pass: vLLM V1 runs the draft passes inside the step, as CUDA-graph replays. The 0.1 ms was not tuned to the point.",
    "Past the crossover the simulated slow-down is steeper than the post's (QPS 10: 0.19 against 0.71): once the "
    "speculative arm saturates, its simulated queue grows for all 600 s; the post does not say how long its runs were.",
    "Embedded: TTFT is under-predicted throughout (the API server's own time per request is not in the engine "
    "model), and TPOT/E2E predictions lean low by 10-20 %; the noise-floor rows bound what any prediction here can do.",
)


# The tests behind this page's claims, as every page of the documentation site names its own (tests/system/test_docs.py
# checks that each one exists).
HELD_BY = (
    "`tests/system/test_sim_validation_vllm.py::test_predictions_of_unseen_loads_are_within_the_stated_bound`: "
    "section 1's predictions of the embedded vLLM at loads it was not calibrated on, within the stated bound.",
    "`tests/unit/sim/test_published.py::test_specdecode_bench_ratios_are_gains_that_shrink_with_batch` and "
    "`tests/unit/sim/test_published.py::test_the_2024_post_shape_speed_up_crossover_slow_down`: section 2's shapes.",
    "`tests/unit/sim/test_published.py::test_docs_validation_is_what_the_code_gives_now`: this page renders "
    "docs/validation.json, whose published numbers are today's simulation.",
)


def render_validation_md(doc: ValidationDoc) -> str:
    lines = [
        "# Validation of `specguard sim`",
        "",
        f"Generated by `bench/sim_validation.py` (specguard {doc.tool_version}); do not edit by hand. Each point is "
        "a measurement the simulator was not fitted to, beside the simulator's prediction of it.",
        "",
    ]
    if doc.embedded is not None:
        lines += _embedded_md(doc.embedded)
    else:
        lines += ["## 1. The embedded vLLM, here", "", "Not run (`--published-only`).", ""]
    lines += ["## 2. Published measurements", ""]
    for r in doc.published:
        lines += _series_md(r)
    lines += ["## 3. Caveats", "", *(f"- {c}" for c in CAVEATS), ""]
    lines += ["## Which tests hold this", "", *(f"- {h}" for h in HELD_BY), ""]
    return "\n".join(lines).rstrip() + "\n"
