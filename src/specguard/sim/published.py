"""Published measurements of speculative decoding in vLLM, and the simulator's predictions of the same settings.

Each ``PublishedSeries`` is one figure's line as its source reports it: the setting (model, GPU, method, k,
lengths), the x axis (request rate or batch size) and the measured ratio at each point. ``simulate_series``
runs the simulator on that setting and returns each point with its error; ``bench/sim_validation.py`` writes
them to docs/validation.md. Nothing here is fitted to the measured points except where a series says so in
``acceptance_rule`` (the October 2024 post gives no acceptance rate, so its QPS-1 point fixes it).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from specguard.sim.run import SimMethod, SimRequest, build_arms, run_sim
from specguard.sim.simulate import simulate_arm

XAxis = Literal["qps", "batch"]
Ratio = Literal["e2e_speedup", "throughput_ratio"]


class PublishedSeries(BaseModel):
    source: str = Field(description="short name of the publication")
    cite: str = Field(description="where the numbers are")
    setting: str = Field(description="the line as the source labels it")
    target: str
    gpu: str
    tensor_parallel_size: int = 1
    engine: Literal["v1", "v0"] = Field(description="the vLLM engine generation the source measured")
    method: SimMethod
    draft: str | None = Field(description="the draft model or EAGLE head; None for n-gram")
    num_speculative_tokens: int
    prompt_len: int
    output_len: int
    lengths_source: str
    acceptance: list[float] | None = Field(default=None, description="per position; None: fitted, see acceptance_rule")
    draft_fraction: float = Field(default=1.0, description="share of decode steps with a draft (n-gram misses)")
    acceptance_rule: str
    x_axis: XAxis
    ratio: Ratio
    points: list[tuple[float, float]] = Field(description="(x, measured ratio), as read off the source")


class ValidationPoint(BaseModel):
    x: float
    measured: float
    simulated: float
    error: float = Field(description="(simulated - measured) / measured")


class SeriesResult(BaseModel):
    series: PublishedSeries
    acceptance: list[float] = Field(description="the per-position rates simulated")
    points: list[ValidationPoint]
    measured_crossover: float | None = Field(description="the lowest x where the ratio falls to 1 or below after >1")
    simulated_crossover: float | None


def _crossover(xs: list[float], ratios: list[float]) -> float | None:
    paid = False
    for x, r in zip(xs, ratios, strict=True):
        if r > 1.0:
            paid = True
        elif paid:
            return x
    return None


# --- The vLLM team's post, 2024-10-17, "How Speculative Decoding Boosts vLLM Performance by up to 2.8x":
# Llama-3-70B on 4 x H100, k = 4, end-to-end latency speed-up against QPS, read off its two figures. vLLM then ran
# its V0 engine (0.6.x). The post states neither acceptance nor lengths: ShareGPT's mean lengths are the vLLM
# paper's (Kwon et al., SOSP 2023, fig. 11: 161 prompt, 338 output tokens); CNN/DailyMail's are SpecDecode-Bench's
# trace means below. Qwama-0.5B (a Qwen2-0.5B with Llama-3's vocabulary) is sized as the catalog's qwen2.5-0.5b.
BLOG_2024 = "vLLM blog, Oct 2024"
BLOG_CITE = "https://blog.vllm.ai/2024/10/17/spec-decode.html"
BLOG_RULE = "not published: a_i = q^i with q fitted so the simulated QPS-1 point equals the measured one"


def _blog(
    setting: str,
    method: SimMethod,
    draft: str | None,
    lengths: tuple[int, int],
    lengths_source: str,
    points: list[tuple[float, float]],
) -> PublishedSeries:
    return PublishedSeries(
        source=BLOG_2024,
        cite=BLOG_CITE,
        setting=setting,
        target="llama-3-70b",
        gpu="h100-80gb",
        tensor_parallel_size=4,
        engine="v0",
        method=method,
        draft=draft,
        num_speculative_tokens=4,
        prompt_len=lengths[0],
        output_len=lengths[1],
        lengths_source=lengths_source,
        acceptance_rule=BLOG_RULE,
        x_axis="qps",
        ratio="e2e_speedup",
        points=points,
    )


BLOG_SERIES = (
    _blog(
        "draft model (Qwama-0.5B), ShareGPT",
        "draft_model",
        "qwen2.5-0.5b",
        (161, 338),
        "ShareGPT means from the vLLM paper (SOSP 2023)",
        [(1, 1.54), (2, 1.49), (4, 1.30), (8, 1.03), (10, 0.71)],
    ),
    _blog(
        "n-gram (prompt lookup), CNN/DailyMail",
        "ngram",
        None,
        (838, 323),
        "CNN/DailyMail trace means from SpecDecode-Bench's repository",
        [(1, 2.82), (2, 2.41), (4, 2.10), (8, 0.54)],
    ),
)

# --- SpecDecode-Bench (arXiv 2601.11580): vLLM 0.10.1 (V1), Llama-3.1-8B-Instruct on 1 x H100, k = 3,
# output-token throughput with / without speculation at a fixed batch (closed loop), fig. "throughput vs batch".
# Acceptance is not fitted: per-position rates computed vLLM's way from the acceptance traces in its simulator
# repository (acc_eagle, acc_ngram) for Llama-3.1-8B; n-gram drafts in only some steps (the traces' match rate).
# Lengths are the traces' means.
SDB = "SpecDecode-Bench"
SDB_CITE = "arXiv 2601.11580, throughput ratio vs batch size (vLLM 0.10.1, 1 x H100)"
SDB_RULE = "per position from the source's own acceptance traces (not fitted)"
SDB_BATCHES = (1, 16, 64, 128)


def _sdb(
    setting: str, method: SimMethod, lengths: tuple[int, int], acc: list[float], frac: float, ratios: list[float]
) -> PublishedSeries:
    return PublishedSeries(
        source=SDB,
        cite=SDB_CITE,
        setting=setting,
        target="llama-3.1-8b",
        gpu="h100-80gb",
        engine="v1",
        method=method,
        draft="eagle3-head" if method == "eagle3" else None,
        num_speculative_tokens=3,
        prompt_len=lengths[0],
        output_len=lengths[1],
        lengths_source="the source's trace means",
        acceptance=acc,
        draft_fraction=frac,
        acceptance_rule=SDB_RULE,
        x_axis="batch",
        ratio="throughput_ratio",
        points=list(zip(map(float, SDB_BATCHES), ratios, strict=True)),
    )


SDB_SERIES = (
    _sdb("EAGLE-3, ShareGPT", "eagle3", (355, 728), [0.621, 0.382, 0.252], 1.0, [1.71, 1.68, 1.55, 1.30]),
    _sdb("n-gram, ShareGPT", "ngram", (355, 728), [0.489, 0.391, 0.325], 0.33, [1.27, 1.25, 1.19, 1.11]),
    _sdb("EAGLE-3, CNN/DailyMail", "eagle3", (838, 323), [0.648, 0.414, 0.269], 1.0, [1.69, 1.58, 1.40, 1.23]),
    _sdb("n-gram, CNN/DailyMail", "ngram", (838, 323), [0.297, 0.220, 0.170], 0.49, [1.34, 1.28, 1.18, 1.12]),
)
PUBLISHED_SERIES = (*BLOG_SERIES, *SDB_SERIES)

OPEN_LOOP_DURATION_S = 600.0
FIT_DURATION_S = 300.0
FIT_ROUNDS = 12
REQUESTS_PER_SLOT = 3  # closed loop: each of the batch's slots runs this many requests,
MIN_REQUESTS = 32  # and at least this many in all, so that a small batch's acceptance draws average out


def _request(s: PublishedSeries, acceptance: list[float], rates: list[float], duration_s: float) -> SimRequest:
    return SimRequest(
        target=s.target,
        gpu=s.gpu,
        tensor_parallel_size=s.tensor_parallel_size,
        rates=rates,
        prompt_len=s.prompt_len,
        output_len=s.output_len,
        method=s.method,
        draft=s.draft,
        num_speculative_tokens=s.num_speculative_tokens,
        acceptance=acceptance,
        duration_s=duration_s,
        engine=s.engine,
    )


def _qps_ratios(s: PublishedSeries, acceptance: list[float], duration_s: float, xs: list[float]) -> list[float]:
    report = run_sim(_request(s, acceptance, xs, duration_s))
    return [p.speedup["e2e_ms"] for p in report.rates]


def _batch_ratio(s: PublishedSeries, acceptance: list[float], batch: int) -> float:
    req = _request(s, acceptance, [1.0], 60.0)
    arms = build_arms(req)
    base_cfg, spec_cfg = arms.engine_config(req, False), arms.engine_config(req, True)
    assert spec_cfg.speculation is not None
    spec_cfg = dataclasses.replace(
        spec_cfg, speculation=dataclasses.replace(spec_cfg.speculation, draft_fraction=s.draft_fraction)
    )
    n = max(REQUESTS_PER_SLOT * batch, MIN_REQUESTS)
    arrivals = np.zeros(n)
    prompts, outputs = np.full(n, s.prompt_len, np.int64), np.full(n, s.output_len, np.int64)
    base = simulate_arm(base_cfg, arms.step, arrivals, prompts, outputs, 0.0, concurrency=batch)
    spec = simulate_arm(spec_cfg, arms.step, arrivals, prompts, outputs, 0.0, concurrency=batch)
    return spec.throughput_tokens_per_s / base.throughput_tokens_per_s


def _geometric(q: float, k: int) -> list[float]:
    return [round(q ** (i + 1), 6) for i in range(k)]


def fit_geometric_acceptance(s: PublishedSeries) -> list[float]:
    """a_i = q^i with q bisected until the simulated ratio at the first point equals the measured one."""
    x0, want = s.points[0]
    lo, hi = 0.05, 0.99
    for _ in range(FIT_ROUNDS):
        q = (lo + hi) / 2
        got = _qps_ratios(s, _geometric(q, s.num_speculative_tokens), FIT_DURATION_S, [x0])[0]
        lo, hi = (q, hi) if got < want else (lo, q)
    return _geometric((lo + hi) / 2, s.num_speculative_tokens)


def simulate_series(s: PublishedSeries) -> SeriesResult:
    """The simulator's ratio at each of the series' points, beside the measured one."""
    acceptance = s.acceptance if s.acceptance is not None else fit_geometric_acceptance(s)
    xs = [x for x, _ in s.points]
    if s.x_axis == "qps":
        sims = _qps_ratios(s, acceptance, OPEN_LOOP_DURATION_S, xs)
    else:
        sims = [_batch_ratio(s, acceptance, int(x)) for x in xs]
    points = [
        ValidationPoint(x=x, measured=m, simulated=round(sim, 3), error=round((sim - m) / m, 3))
        for (x, m), sim in zip(s.points, sims, strict=True)
    ]
    measured = [m for _, m in s.points]
    return SeriesResult(
        series=s,
        acceptance=acceptance,
        points=points,
        measured_crossover=_crossover(xs, measured),
        simulated_crossover=_crossover(xs, sims),
    )


__all__ = ["PUBLISHED_SERIES", "PublishedSeries", "SeriesResult", "ValidationPoint", "simulate_series"]
