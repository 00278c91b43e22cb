"""The checklist's decision rule, executable: GO, NO-GO or INCONCLUSIVE from per-cell comparisons. Pure.

A cell is one traffic level x sampling setting x prompt segment; segments are
never averaged together. GO only when the objective improves by at least the
minimum, with its interval excluding no change, in every cell at the target
traffic level(s), and nothing regresses anywhere: P99 E2E and TTFT within
their budgets, errors and preemptions within theirs, no crash or OOM.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from specguard.analysis.ab_statistics import RatioResult
from specguard.check.plan import Guardrails, Objective

Status = Literal["better", "worse", "no detectable difference", "inconclusive"]
VerdictName = Literal["GO", "NO-GO", "INCONCLUSIVE"]


class CellComparison(BaseModel):
    traffic: str
    offered_load: float
    target: bool
    sampling: str
    segment: str
    objective: RatioResult
    p99_e2e: RatioResult
    p99_ttft: RatioResult
    error_rate_baseline: float
    error_rate_candidate: float
    preemptions_baseline: float | None = None
    preemptions_candidate: float | None = None
    acceptance_rate: float | None = None
    kv_usage_baseline: float | None = None
    kv_usage_candidate: float | None = None
    waiting_baseline: float | None = None
    waiting_candidate: float | None = None
    client_warnings: list[str] = []
    metrics: dict[str, dict[str, RatioResult]] = {}

    @property
    def name(self) -> str:
        return f"{self.traffic} / {self.sampling} / {self.segment}"


class Failure(BaseModel):
    """A server of an arm that crashed or ran out of memory during the measurements."""

    arm: str
    kind: Literal["crash", "oom"]
    detail: str


class CellLine(BaseModel):
    traffic: str
    sampling: str
    segment: str
    status: Status
    text: str


class Verdict(BaseModel):
    verdict: VerdictName
    reasons: list[str]
    lines: list[CellLine]
    warnings: list[str]
    crossover: list[str]
    objective: str


def objective_gain(obj: RatioResult, higher_is_better: bool) -> tuple[float, float, float]:
    """(change, low, high) as fractional improvement: positive is better for the candidate."""
    if higher_is_better:
        return obj.ratio - 1, obj.ci_low - 1, obj.ci_high - 1
    return 1 - obj.ratio, 1 - obj.ci_high, 1 - obj.ci_low


def cell_status(cell: CellComparison, higher_is_better: bool) -> Status:
    if not cell.objective.enough_samples:
        return "inconclusive"
    _, low, high = objective_gain(cell.objective, higher_is_better)
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "no detectable difference"


def _guardrail(name: str, r: RatioResult, budget: float, where: str) -> tuple[str | None, str | None]:
    """(regression reason, unverified reason) for one P99 guardrail."""
    if not r.enough_samples:
        return None, (
            f"{name} at {where} unverified: {min(r.n_baseline, r.n_candidate)} requests per arm, "
            f"{r.more_requests_needed} more needed"
        )
    if r.ratio > 1 + budget and r.ci_low > 1:
        return (
            f"{name} regressed at {where}: x{r.ratio:.2f} (95% CI {r.ci_low:.2f}-{r.ci_high:.2f}), budget +{budget:.0%}"
        ), None
    return None, None


def decide(
    cells: Sequence[CellComparison],
    objective: Objective,
    guardrails: Guardrails,
    failures: Sequence[Failure] = (),
) -> Verdict:
    higher = objective.metric == "output_tokens_per_s"
    obj_name = f"{objective.percentile} {objective.metric}"
    nogo: list[str] = []
    unsure: list[str] = []
    warnings: list[str] = []
    lines: list[CellLine] = []
    for f in failures:
        nogo.append(f"{f.arm} server {'ran out of memory' if f.kind == 'oom' else 'crashed'}: {f.detail}")
    for cell in cells:
        status = cell_status(cell, higher)
        gain, low, high = objective_gain(cell.objective, higher)
        text = (
            f"{obj_name} {cell.objective.baseline:.2f} -> {cell.objective.candidate:.2f} "
            f"({gain:+.1%}, 95% CI {low:+.1%} to {high:+.1%})"
        )
        lines.append(CellLine(traffic=cell.traffic, sampling=cell.sampling, segment=cell.segment, status=status, text=text))
        if cell.target:
            if status == "inconclusive":
                unsure.append(
                    f"{obj_name} at {cell.name}: too few samples "
                    f"({cell.objective.more_requests_needed} more requests per arm needed)"
                )
            elif status == "worse":
                nogo.append(f"{obj_name} is worse at target {cell.name}: {text}")
            elif status == "no detectable difference":
                nogo.append(f"{obj_name} shows no detectable improvement at target {cell.name}: {text}")
            elif gain < objective.min_improvement:
                nogo.append(
                    f"{obj_name} improves by {gain:.1%} at target {cell.name}, "
                    f"less than the {objective.min_improvement:.0%} that counts"
                )
        for name, r, budget in (
            ("P99 E2E", cell.p99_e2e, guardrails.max_p99_e2e_regression),
            ("P99 TTFT", cell.p99_ttft, guardrails.max_p99_ttft_regression),
        ):
            bad, unknown = _guardrail(name, r, budget, cell.name)
            if bad:
                nogo.append(bad)
            if unknown:
                unsure.append(unknown)
        rise = cell.error_rate_candidate - cell.error_rate_baseline
        if rise > guardrails.max_error_rate_increase:
            nogo.append(
                f"error rate rose at {cell.name}: {cell.error_rate_baseline:.1%} -> "
                f"{cell.error_rate_candidate:.1%} (budget +{guardrails.max_error_rate_increase:.1%})"
            )
        if cell.preemptions_baseline is not None and cell.preemptions_candidate is not None:
            extra = cell.preemptions_candidate - cell.preemptions_baseline
            if extra > guardrails.max_preemption_increase:
                nogo.append(
                    f"preemptions rose at {cell.name}: {cell.preemptions_baseline:.0f} -> {cell.preemptions_candidate:.0f}"
                )
        warnings += _warnings(cell)
    unsure = _condense(unsure)
    if nogo:
        verdict: VerdictName = "NO-GO"
        reasons = nogo + [f"also: {u}" for u in unsure]
    elif unsure:
        verdict, reasons = "INCONCLUSIVE", unsure
    else:
        verdict = "GO"
        reasons = [
            f"{obj_name} improves by at least {objective.min_improvement:.0%} with its interval excluding "
            "no change in every target cell, and no guardrail regressed at any level"
        ]
    return Verdict(
        verdict=verdict,
        reasons=reasons,
        lines=lines,
        warnings=sorted(set(warnings), key=warnings.index),
        crossover=crossovers(cells, higher),
        objective=obj_name,
    )


def _condense(unsure: list[str], keep: int = 4) -> list[str]:
    """Many unverified guardrails say one thing: name a few, count the rest."""
    guard = [u for u in unsure if " unverified: " in u]
    if len(guard) <= keep:
        return unsure
    others = [u for u in unsure if u not in guard]
    return others + guard[:keep] + [f"... and {len(guard) - keep} more unverified P99 guardrails (see the report)"]


def _warnings(cell: CellComparison) -> list[str]:
    # Client warnings belong to whole runs, shared by the segments of a cell.
    out = [f"{cell.traffic} / {cell.sampling}: {w}" for w in cell.client_warnings]
    if cell.acceptance_rate is not None and cell.acceptance_rate < 0.5:
        out.append(f"{cell.name}: acceptance rate {cell.acceptance_rate:.2f} < 0.5, speculation is likely net-negative")
    for what, b, c in (
        ("KV-cache usage", cell.kv_usage_baseline, cell.kv_usage_candidate),
        ("waiting requests", cell.waiting_baseline, cell.waiting_candidate),
    ):
        if b is not None and c is not None and c > b * 1.2 + 0.01:
            out.append(f"{cell.name}: {what} rose on the candidate ({b:.3f} -> {c:.3f} mean)")
    return out


def crossovers(cells: Sequence[CellComparison], higher_is_better: bool) -> list[str]:
    """Per sampling x segment: the lowest load where speculation stops paying, after paying at a lower one."""
    groups: dict[tuple[str, str], list[CellComparison]] = defaultdict(list)
    for c in cells:
        groups[(c.sampling, c.segment)].append(c)
    out = []
    for (sampling, segment), group in groups.items():
        group.sort(key=lambda c: c.offered_load)
        paid = False
        for c in group:
            status = cell_status(c, higher_is_better)
            if status == "better":
                paid = True
            elif paid and status in ("worse", "no detectable difference"):
                out.append(
                    f"{sampling} / {segment}: speculation stops paying at '{c.traffic}' "
                    f"(offered load {c.offered_load:g}): {status}"
                )
                break
    return out
