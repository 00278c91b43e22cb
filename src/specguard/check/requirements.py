"""What a plan needs before it can reach GO, known when it is loaded: requests per cell for each percentile. Pure.

A P99 guardrail counts only with ``min_tail_samples`` observations beyond it (500 requests per arm and cell
at the default 5), so a plan with fewer can never be GO; it should say so before any traffic is sent, not
after an hour of measurements. Planned requests per cell are the traffic level's ``num_requests`` (or
rate x duration) times the repetitions, split among the segments of a prompt source (not known before the
run: the figure is the most a segment can get). With ``guardrails.scope: level`` (the default) a P99
guardrail pools a level's cells, so each of its sampling x prompt-source cells needs only its share of
the 500.
"""

from __future__ import annotations

from pydantic import BaseModel

from specguard.analysis.ab_statistics import min_samples
from specguard.analysis.compare import QUANTILES
from specguard.check.plan import CheckPlan, TrafficLevel

__all__ = ["CellRequirement", "plan_requirements", "plan_warnings"]


class CellRequirement(BaseModel):
    """Requests per arm one traffic level's cells need, by what needs them, against what the plan sends."""

    traffic: str
    planned: int | None  # per arm, all repetitions; None when the level is bounded by neither count nor duration
    objective: int
    guardrails: dict[str, int]

    @property
    def needed(self) -> int:
        return max([self.objective, *self.guardrails.values()])


def _planned(t: TrafficLevel, repetitions: int) -> int | None:
    if t.num_requests is not None:
        return t.num_requests * repetitions
    if t.duration_s is not None and t.rate is not None:
        return int(t.rate * t.duration_s) * repetitions
    return None


def plan_requirements(plan: CheckPlan) -> list[CellRequirement]:
    """Per traffic level (each of its sampling x segment cells alike), the requests per arm each percentile needs."""
    tail = plan.statistics.min_tail_samples
    q_obj = QUANTILES[plan.objective.percentile]
    # Throughput has one value per run, not per request: its need is the repetitions, not a tail count.
    objective = 0 if plan.objective.metric == "output_tokens_per_s" else min_samples(q_obj, tail)
    p99 = min_samples(0.99, tail)
    if plan.guardrails.scope == "level":  # a level's P99 pools its cells: each cell carries its share of the tail
        p99 = -(-p99 // (len(plan.sampling) * len(plan.prompts)))
    return [
        CellRequirement(
            traffic=t.name,
            planned=_planned(t, plan.repetitions),
            objective=objective,
            guardrails={"P99 E2E": p99, "P99 TTFT": p99},
        )
        for t in plan.levels
    ]


def plan_warnings(plan: CheckPlan) -> list[str]:
    """Why this plan cannot reach GO by construction, one line per traffic level that falls short."""
    out = []
    for r in plan_requirements(plan):
        if r.planned is not None and r.planned < r.needed:
            short = [name for name, need in ({"objective": r.objective} | r.guardrails).items() if r.planned < need]
            out.append(
                f"traffic '{r.traffic}': {r.planned} requests per arm and cell, fewer than the {r.needed} that "
                f"{', '.join(short)} need (min_tail_samples {plan.statistics.min_tail_samples}): this plan cannot reach GO"
            )
    return out
