"""The checklist's decision rule, executable: GO, NO-GO or INCONCLUSIVE from per-cell comparisons. Pure.

A cell is one traffic level x sampling setting x prompt segment; segments are
never averaged together. GO only when at least one cell was measured on both
arms, the objective improves by at least the minimum, with its interval
excluding no change, in every cell at the target traffic level(s), and
nothing regresses anywhere: P99 E2E and TTFT within their budgets, errors and
preemptions within theirs, no crash or OOM.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from specguard.analysis.ab_statistics import RatioResult
from specguard.analysis.gpu_usage import higher_utilisation_warning
from specguard.verdict.model import (
    CellComparison,
    CellLine,
    Failure,
    GuardrailRule,
    ObjectiveRule,
    Reason,
    Status,
    Verdict,
    VerdictName,
)


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


def failure_reasons(failures: Sequence[Failure]) -> list[Reason]:
    return [
        Reason(
            code="server_oom" if f.kind == "oom" else "server_crash",
            text=f"{f.arm} server {'ran out of memory' if f.kind == 'oom' else 'crashed'}: {f.detail}",
        )
        for f in failures
    ]


def cell_line(cell: CellComparison, obj_name: str, higher: bool) -> CellLine:
    gain, low, high = objective_gain(cell.objective, higher)
    text = (
        f"{obj_name} {cell.objective.baseline:.2f} -> {cell.objective.candidate:.2f} "
        f"({gain:+.1%}, 95% CI {low:+.1%} to {high:+.1%})"
    )
    status = cell_status(cell, higher)
    return CellLine(traffic=cell.traffic, sampling=cell.sampling, segment=cell.segment, status=status, text=text)


def objective_reason(cell: CellComparison, line: CellLine, objective: ObjectiveRule, obj_name: str) -> Reason | None:
    """What the objective says at a target cell: None when it improves by the minimum, with confidence."""
    higher = objective.metric == "output_tokens_per_s"
    gain, low, high = objective_gain(cell.objective, higher)
    numbers = {"gain": gain, "ci_low": low, "ci_high": high}
    if line.status == "inconclusive":
        need = cell.objective.more_requests_needed
        return Reason(
            code="objective_undersampled",
            numbers={"more_requests_needed": need},
            text=f"{obj_name} at {cell.name}: too few samples ({need} more requests per arm needed)",
            cell=cell.name,
            metric=obj_name,
        )
    if line.status == "worse":
        text = f"{obj_name} is worse at target {cell.name}: {line.text}"
        return Reason(code="objective_worse", numbers=numbers, text=text, cell=cell.name, metric=obj_name)
    if line.status == "no detectable difference":
        text = f"{obj_name} shows no detectable improvement at target {cell.name}: {line.text}"
        return Reason(code="objective_no_difference", numbers=numbers, text=text, cell=cell.name, metric=obj_name)
    if gain < objective.min_improvement:
        text = (
            f"{obj_name} improves by {gain:.1%} at target {cell.name}, less than the {objective.min_improvement:.0%} that counts"
        )
        numbers["min_improvement"] = objective.min_improvement
        return Reason(code="objective_below_minimum", numbers=numbers, text=text, cell=cell.name, metric=obj_name)
    return None


def guardrail_reason(name: str, r: RatioResult, budget: float, where: str) -> Reason | None:
    """A regressed or an unverified P99 guardrail, or None when it holds."""
    if not r.enough_samples:
        per_arm = min(r.n_baseline, r.n_candidate)
        return Reason(
            code="guardrail_unverified",
            cell=where,
            metric=name,
            numbers={"requests_per_arm": per_arm, "more_requests_needed": r.more_requests_needed},
            text=f"{name} at {where} unverified: {per_arm} requests per arm, {r.more_requests_needed} more needed",
        )
    if r.ratio > 1 + budget and r.ci_low > 1:
        return Reason(
            code="guardrail_regressed",
            cell=where,
            metric=name,
            numbers={"ratio": r.ratio, "ci_low": r.ci_low, "ci_high": r.ci_high, "budget": budget},
            text=f"{name} regressed at {where}: x{r.ratio:.2f} (95% CI {r.ci_low:.2f}-{r.ci_high:.2f}), budget +{budget:.0%}",
        )
    return None


def guardrail_reasons(cell: CellComparison, guardrails: GuardrailRule) -> list[Reason]:
    out = [
        guardrail_reason("P99 E2E", cell.p99_e2e, guardrails.max_p99_e2e_regression, cell.name),
        guardrail_reason("P99 TTFT", cell.p99_ttft, guardrails.max_p99_ttft_regression, cell.name),
    ]
    return [r for r in out if r is not None]


def error_reasons(cell: CellComparison, guardrails: GuardrailRule) -> list[Reason]:
    """Errors and preemptions beyond their budgets."""
    out = []
    b, c = cell.error_rate_baseline, cell.error_rate_candidate
    if c - b > guardrails.max_error_rate_increase:
        budget = guardrails.max_error_rate_increase
        out.append(
            Reason(
                code="error_rate_rose",
                cell=cell.name,
                metric="error_rate",
                numbers={"baseline": b, "candidate": c, "budget": budget},
                text=f"error rate rose at {cell.name}: {b:.1%} -> {c:.1%} (budget +{budget:.1%})",
            )
        )
    pb, pc = cell.preemptions_baseline, cell.preemptions_candidate
    if pb is not None and pc is not None and pc - pb > guardrails.max_preemption_increase:
        out.append(
            Reason(
                code="preemptions_rose",
                cell=cell.name,
                metric="preemptions",
                numbers={"baseline": pb, "candidate": pc},
                text=f"preemptions rose at {cell.name}: {pb:.0f} -> {pc:.0f}",
            )
        )
    return out


def condense(unsure: list[Reason], keep: int = 4) -> list[Reason]:
    """Many unverified guardrails say one thing: name a few, count the rest."""
    guard = [u for u in unsure if u.code == "guardrail_unverified"]
    if len(guard) <= keep:
        return unsure
    others = [u for u in unsure if u.code != "guardrail_unverified"]
    more = len(guard) - keep
    rest = Reason(
        code="guardrails_unverified_more",
        numbers={"count": more},
        text=f"... and {more} more unverified P99 guardrails (see the report)",
    )
    return others + guard[:keep] + [rest]


def no_cell_reason() -> Reason:
    return Reason(code="no_cell_measured", text="no cell was measured on both arms")


def go_reason(obj_name: str, objective: ObjectiveRule) -> Reason:
    return Reason(
        code="go",
        metric=obj_name,
        numbers={"min_improvement": objective.min_improvement},
        text=f"{obj_name} improves by at least {objective.min_improvement:.0%} with its interval excluding "
        "no change in every target cell, and no guardrail regressed at any level",
    )


def secondary(r: Reason) -> Reason:
    return r.model_copy(update={"secondary": True, "text": f"also: {r.text}"})


def cell_reasons(
    cell: CellComparison, line: CellLine, objective: ObjectiveRule, obj_name: str, guardrails: GuardrailRule
) -> list[Reason]:
    """Everything one cell says against GO, in the order people read it: objective, tails, errors."""
    obj = objective_reason(cell, line, objective, obj_name) if cell.target else None
    return ([obj] if obj else []) + guardrail_reasons(cell, guardrails) + error_reasons(cell, guardrails)


def is_unsure(r: Reason) -> bool:
    return r.code in ("objective_undersampled", "guardrail_unverified")


def verdict_and_reasons(nogo: list[Reason], unsure: list[Reason], measured: bool, go: Reason) -> tuple[VerdictName, list[Reason]]:
    """NO-GO outranks INCONCLUSIVE (keeping its reasons, marked), which outranks GO; nothing measured is never GO."""
    if nogo:
        return "NO-GO", nogo + [secondary(u) for u in unsure]
    if unsure:
        return "INCONCLUSIVE", unsure
    if not measured:
        return "INCONCLUSIVE", [no_cell_reason()]
    return "GO", [go]


def decide(
    cells: Sequence[CellComparison],
    objective: ObjectiveRule,
    guardrails: GuardrailRule,
    failures: Sequence[Failure] = (),
) -> Verdict:
    higher = objective.metric == "output_tokens_per_s"
    obj_name = f"{objective.percentile} {objective.metric}"
    lines = [cell_line(c, obj_name, higher) for c in cells]
    found = failure_reasons(failures) + [
        r for c, line in zip(cells, lines) for r in cell_reasons(c, line, objective, obj_name, guardrails)
    ]
    nogo = [r for r in found if not is_unsure(r)]
    unsure = condense([r for r in found if is_unsure(r)])
    verdict, reasons = verdict_and_reasons(nogo, unsure, bool(cells), go_reason(obj_name, objective))
    warnings = [w for c in cells for w in cell_warnings(c)]
    return Verdict(
        verdict=verdict,
        reasons=reasons,
        lines=lines,
        warnings=sorted(set(warnings), key=warnings.index),
        crossover=crossovers(cells, higher),
        objective=obj_name,
    )


def cell_warnings(cell: CellComparison) -> list[str]:
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
    gpu = higher_utilisation_warning(
        cell.name, cell.gpu_util_baseline, cell.gpu_util_candidate, cell.tokens_per_s_baseline, cell.tokens_per_s_candidate
    )
    return out + ([gpu] if gpu else [])


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
