"""Gate 1 as rules: is a segment's traffic a candidate for speculation, and with what? Pure.

Each rule is the checklist's, with the threshold it uses stated in the reason:
saturated serving leaves speculation off; high-temperature traffic makes the
replay an upper bound and usually a poor candidate; the predicted reduction in
target-model steps must be worth the verification work; a plan whose KV
budget is pushed past the expected concurrency by speculation is a warning.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Verdict = Literal["candidate", "poor candidate", "leave speculation off"]

SATURATION = 0.8  # peak load above this share of capacity: saturated
HIGH_TEMPERATURE_SHARE = 0.5  # at least this share of requests sampled above 0.7 (or unset): high temperature
STRONG_REDUCTION = 0.25  # predicted share of target-model steps saved
WEAK_REDUCTION = 0.10
# Each verified draft token costs a little target compute; on a memory-bound GPU far less than a step.
VERIFY_COST_PER_TOKEN = 0.03


def modelled_speedup(baseline_steps: int, steps: int, draft_tokens: int) -> float | None:
    """baseline steps / (steps + c x draft tokens), c = VERIFY_COST_PER_TOKEN: a ranking aid, not a promise."""
    cost = steps + VERIFY_COST_PER_TOKEN * draft_tokens
    return baseline_steps / cost if cost else None


class LoadFacts(BaseModel):
    """What is known about load: the segment's own and the capacity it runs against."""

    peak_rps: float | None = None
    peak_concurrency: float | None = None
    capacity_rps: float | None = Field(default=None, description="given by the user or measured by a bench run")
    capacity_concurrency: int | None = Field(default=None, description="speculative max concurrency from a plan")
    plan_warnings: list[str] = Field(default_factory=list)


class Candidacy(BaseModel):
    verdict: Verdict
    reasons: list[str]
    method: str | None = None
    config: dict[str, Any] | None = None


def decide_candidacy(
    step_reduction: float | None,
    high_temperature_share: float,
    load: LoadFacts,
    best_method: str | None,
    best_config: dict[str, Any] | None,
    *,
    replayed: int,
) -> Candidacy:
    """The segment's verdict and its reasons; ``replayed`` is how many of its requests had a response to replay."""
    reasons: list[str] = []
    saturated = False
    if load.capacity_rps and load.peak_rps is not None:
        share = load.peak_rps / load.capacity_rps
        saturated |= share > SATURATION
        reasons.append(
            f"peak load {load.peak_rps:.2f} req/s is {share:.0%} of the {load.capacity_rps:.2f} req/s capacity "
            f"({'saturated' if share > SATURATION else 'headroom'}; threshold {SATURATION:.0%})"
        )
    if load.capacity_concurrency and load.peak_concurrency is not None:
        share = load.peak_concurrency / load.capacity_concurrency
        saturated |= share > SATURATION
        reasons.append(
            f"peak concurrency {load.peak_concurrency:.0f} is {share:.0%} of the {load.capacity_concurrency} "
            "sequences the KV cache holds with speculation"
        )
    if not (load.capacity_rps or load.capacity_concurrency):
        reasons.append("load not judged: give --capacity-rps, a bench run (--bench-run) or a plan (--plan-json)")
    kv_pressure = [w for w in load.plan_warnings if "past the KV capacity" in w]
    reasons += [f"plan: {w}" for w in kv_pressure]
    hot = high_temperature_share >= HIGH_TEMPERATURE_SHARE
    reasons.append(
        f"{high_temperature_share:.0%} of requests sample above temperature 0.7 or leave it unset"
        + (" (high temperature: the replay is an upper bound)" if hot else "")
    )
    if step_reduction is None:
        reasons.append(no_prediction_reason(replayed))
        return Candidacy(verdict="poor candidate", reasons=reasons)
    strength = "strong" if step_reduction >= STRONG_REDUCTION else "weak" if step_reduction >= WEAK_REDUCTION else "negligible"
    reasons.append(
        f"best predicted reduction in target-model steps: {step_reduction:.0%} with {best_method} "
        f"({strength}; {WEAK_REDUCTION:.0%} and {STRONG_REDUCTION:.0%} are the lines)"
    )
    if saturated or kv_pressure or (hot and strength == "negligible"):
        verdict: Verdict = "leave speculation off"
    elif strength == "negligible" or (hot and strength == "weak"):
        verdict = "poor candidate"
    else:
        verdict = "candidate"
    if verdict != "candidate":
        reasons.append("a draft model or EAGLE head may still do better; logs cannot predict it without the model")
        return Candidacy(verdict=verdict, reasons=reasons)
    if best_method == "suffix":
        reasons.append("suffix decoding needs arctic-inference installed next to vLLM (0.12+); check with preflight")
    return Candidacy(verdict=verdict, reasons=reasons, method=best_method, config=best_config)


def no_prediction_reason(replayed: int) -> str:
    """Why no acceptance was predicted: no response in the log, or responses on which no proposer drafted a token."""
    if replayed == 0:
        return "no responses to replay: acceptance cannot be predicted"
    # One logged response of two tokens (the README's old example) has one decode step after the prefill: nothing to
    # draft from. Saying "no responses" there contradicted the "1 with responses" line above it (issue 29).
    return (
        f"no proposer drafted a token on the {replayed} response{'s' if replayed != 1 else ''} replayed (too short, or "
        "no repeated n-grams): acceptance cannot be predicted from this log"
    )
