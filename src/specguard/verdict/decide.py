"""The checklist's decision rule, executable: GO, NO-GO or INCONCLUSIVE from per-cell comparisons. Pure.

A cell is one traffic level x sampling setting x prompt segment; segments are
never averaged together. GO only when at least one cell was measured on both
arms, the objective improves by at least the minimum, with its interval
excluding no change, in every cell at the target traffic level(s), and
nothing can be beyond its budget anywhere: every guardrail's interval (P99 E2E
and TTFT ratios, the error-rate difference, and when the plan asks, the goodput
ratio and the greedy-output divergence difference) lies within its budget, preemptions
within theirs, no crash or OOM, and no cell was measured on one arm only. A
guardrail is NO-GO only when it lies beyond its budget with Holm's correction
over all guardrail tests of the plan; straddling the budget is INCONCLUSIVE
(see ``budget_tests`` for why this shape).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from specguard.analysis.ab_statistics import RatioResult
from specguard.analysis.definitions import HIGHER_IS_BETTER
from specguard.analysis.gpu_usage import higher_utilisation_warning
from specguard.report.numbers import fmt_change, fmt_ratio_ci
from specguard.verdict.budget_tests import (
    error_difference_interval,
    error_p_beyond,
    holm,
    ratio_p_beyond,
    ratio_upper,
    requests_to_resolve,
)
from specguard.verdict.guards import GuardTest, equivalence_guard, equivalence_warnings, error_advice, goodput_guard
from specguard.verdict.model import (
    CellComparison,
    CellLine,
    Crossover,
    EquivalenceRule,
    Failure,
    GuardrailRule,
    ObjectiveRule,
    OneArmCell,
    Reason,
    ReasonCode,
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
    o = cell.objective
    # a ratio with its interval, never "1 - ratio" as a percentage: that once read "-1197516 %"
    text = (
        f"{obj_name} {o.baseline:.2f} -> {o.candidate:.2f} ({fmt_ratio_ci(o.ratio, o.ci_low, o.ci_high)}; {fmt_change(o.ratio)})"
    )
    status = cell_status(cell, higher)
    return CellLine(traffic=cell.traffic, sampling=cell.sampling, segment=cell.segment, status=status, text=text)


def objective_reason(cell: CellComparison, line: CellLine, objective: ObjectiveRule, obj_name: str) -> Reason | None:
    """What the objective says at a target cell: None when it improves by the minimum, with confidence."""
    higher = objective.metric in HIGHER_IS_BETTER
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


def ratio_guard(name: str, r: RatioResult, budget: float, where: str) -> GuardTest:
    """A P99 guardrail as a test of "ratio <= 1 + budget"."""
    numbers = {"ratio": r.ratio, "ci_low": r.ci_low, "ci_high": r.ci_high, "budget": budget}
    if not r.enough_samples:
        per_arm = min(r.n_baseline, r.n_candidate)
        reason = Reason(
            code="guardrail_unverified",
            cell=where,
            metric=name,
            numbers={"requests_per_arm": per_arm, "more_requests_needed": r.more_requests_needed},
            text=f"{name} at {where} unverified: {per_arm} requests per arm, {r.more_requests_needed} more needed",
        )
        return GuardTest(where, name, budget, 1.0, False, numbers, r.more_requests_needed, reason)
    limit = 1 + budget
    within = ratio_upper(r) <= limit
    return GuardTest(where, name, budget, ratio_p_beyond(r, limit), within, numbers, requests_to_resolve(r, limit))


def error_counts(cell: CellComparison) -> tuple[tuple[int, int], tuple[int, int]]:
    """(errors, requests) per arm; a cell without counts (older inputs) takes them from its rates and P99 E2E sizes."""
    eb, nb, ec, nc = cell.errors_baseline, cell.requests_baseline, cell.errors_candidate, cell.requests_candidate
    if eb is not None and nb is not None and ec is not None and nc is not None:
        return (eb, nb), (ec, nc)
    nb, nc = cell.p99_e2e.n_baseline, cell.p99_e2e.n_candidate
    return (round(cell.error_rate_baseline * nb), nb), (round(cell.error_rate_candidate * nc), nc)


def error_guard(cell: CellComparison, budget: float) -> GuardTest:
    """The error rate as a two-proportion test of "candidate rate - baseline rate <= budget"."""
    (eb, nb), (ec, nc) = error_counts(cell)
    numbers = {"baseline": cell.error_rate_baseline, "candidate": cell.error_rate_candidate, "budget": budget}
    if nb == 0 or nc == 0:
        reason = Reason(
            code="guardrail_unverified",
            cell=cell.name,
            metric="error_rate",
            numbers={"requests_per_arm": min(nb, nc), "more_requests_needed": 0},
            text=f"error rate at {cell.name} unverified: an arm without requests",
        )
        return GuardTest(cell.name, "error_rate", budget, 1.0, False, numbers, 0, reason)
    lo, hi = error_difference_interval((eb, nb), (ec, nc))
    numbers |= {"ci_low": lo, "ci_high": hi, "errors_baseline": eb, "errors_candidate": ec}
    numbers |= {"requests_baseline": nb, "requests_candidate": nc}
    p = error_p_beyond((eb, nb), (ec, nc), budget)
    return GuardTest(cell.name, "error_rate", budget, p, hi <= budget, numbers, error_advice(lo, hi, budget, min(nb, nc)))


def guard_tests(cell: CellComparison, guardrails: GuardrailRule, equivalence: EquivalenceRule | None = None) -> list[GuardTest]:
    """The cell's guardrail tests: P99 E2E, P99 TTFT, error rate; goodput and greedy outputs when the plan asks."""
    tests = [
        ratio_guard("P99 E2E", cell.p99_e2e, guardrails.max_p99_e2e_regression, cell.name),
        ratio_guard("P99 TTFT", cell.p99_ttft, guardrails.max_p99_ttft_regression, cell.name),
        error_guard(cell, guardrails.max_error_rate_increase),
    ]
    if guardrails.max_goodput_drop is not None and (g := goodput_guard(cell, guardrails.max_goodput_drop)) is not None:
        tests.append(g)
    if equivalence is not None and equivalence.guardrail:
        if (e := equivalence_guard(cell, equivalence.max_extra_divergence)) is not None:
            tests.append(e)
    return tests


def guard_reason(t: GuardTest, beyond: bool) -> Reason | None:
    """What a guardrail says: beyond its budget (Holm-rejected), straddling it, or None when it holds."""
    if t.unverified is not None:
        return t.unverified
    numbers = t.numbers | {"p_value": t.p_beyond}
    lo, hi = t.numbers["ci_low"], t.numbers["ci_high"]
    code: ReasonCode
    unresolved: ReasonCode
    if t.codes is not None and t.what is not None:
        what, (code, unresolved) = t.what, t.codes
        text = f"{t.label} {t.verb} at {t.cell}: {what}"
    elif t.metric == "error_rate":
        b, c = t.numbers["baseline"], t.numbers["candidate"]
        what = f"{b:.1%} -> {c:.1%} (difference 95% CI {lo:+.1%} to {hi:+.1%}), budget +{t.budget:.1%}"
        code, text = "error_rate_rose", f"error rate rose at {t.cell}: {what}"
        unresolved = "error_rate_unresolved"
    else:
        what = f"x{t.numbers['ratio']:.2f} (95% CI x{lo:.2f} to x{hi:.2f}), budget +{t.budget:.0%}"
        code, text = "guardrail_regressed", f"{t.metric} regressed at {t.cell}: {what}"
        unresolved = "guardrail_unresolved"
    if beyond:
        return Reason(code=code, cell=t.cell, metric=t.metric, numbers=numbers, text=text)
    if t.within:
        return None
    need = t.more_requests_needed
    numbers["more_requests_needed"] = need
    name = t.label or ("error rate" if t.metric == "error_rate" else t.metric)
    text = f"{name} at {t.cell} straddles its budget: {what}; about {need} more requests per arm would resolve it"
    return Reason(code=unresolved, cell=t.cell, metric=t.metric, numbers=numbers, text=text)


def guardrail_verdicts(
    cells: Sequence[CellComparison], guardrails: GuardrailRule, equivalence: EquivalenceRule | None = None
) -> list[list[Reason]]:
    """Per cell, its guardrails' reasons; the NO-GO claims made with Holm's correction over the whole plan."""
    tests = [guard_tests(c, guardrails, equivalence) for c in cells]
    flat = [t for ts in tests for t in ts if t.unverified is None]
    beyond = {id(t): b for t, b in zip(flat, holm([t.p_beyond for t in flat]))}
    return [[r for t in ts if (r := guard_reason(t, beyond.get(id(t), False))) is not None] for ts in tests]


def preemption_reasons(cell: CellComparison, guardrails: GuardrailRule) -> list[Reason]:
    """Preemptions beyond their budget: summed counts per arm, no test (any rise past the budget counts)."""
    out = []
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
        text=f"... and {more} more unverified guardrails (see the report)",
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
        "no change in every target cell, and every guardrail's interval lies within its budget at every level",
    )


def secondary(r: Reason) -> Reason:
    return r.model_copy(update={"secondary": True, "text": f"also: {r.text}"})


def cell_reasons(
    cell: CellComparison,
    line: CellLine,
    objective: ObjectiveRule,
    obj_name: str,
    guardrails: GuardrailRule,
    guards: list[Reason],
) -> list[Reason]:
    """Everything one cell says against GO, in the order people read it: objective, tails and errors, preemptions."""
    obj = objective_reason(cell, line, objective, obj_name) if cell.target else None
    return ([obj] if obj else []) + guards + preemption_reasons(cell, guardrails)


def baseline_mismatch_reason(cell: str, detail: str) -> Reason:
    """A cell whose imported baseline turned out to be of other prompts: no comparison there, as with one arm."""
    return Reason(code="baseline_mismatch", cell=cell, text=f"{cell}: no comparison: {detail}")


def one_arm_reason(c: OneArmCell) -> Reason:
    text = f"{c.name} was measured on the {c.measured} arm only: no comparison there"
    return Reason(code="cell_one_arm", cell=c.name, text=text)


UNSURE: frozenset[str] = frozenset(
    {
        "objective_undersampled",
        "guardrail_unverified",
        "guardrail_unresolved",
        "error_rate_unresolved",
        "goodput_unresolved",
        "output_divergence_unresolved",
        "cell_one_arm",
        "baseline_mismatch",
    }
)


def is_unsure(r: Reason) -> bool:
    return r.code in UNSURE


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
    one_arm: Sequence[OneArmCell] = (),
    equivalence: EquivalenceRule | None = None,
    baseline_mismatches: Sequence[tuple[str, str]] = (),
) -> Verdict:
    """The verdict; ``one_arm`` names the cells that only one arm measured (each keeps GO out of reach).

    ``equivalence`` (the plan's ``equivalence:``) makes greedy-output divergence a guardrail when it says so;
    its warning is given either way. ``baseline_mismatches``: (cell, what differs) for cells whose imported
    baseline proved, once the candidate ran, not to be of the same prompts; like a one-arm cell, no GO.
    """
    higher = objective.metric in HIGHER_IS_BETTER
    obj_name = f"{objective.percentile} {objective.metric}"
    lines = [cell_line(c, obj_name, higher) for c in cells]
    guards = guardrail_verdicts(cells, guardrails, equivalence)
    found = failure_reasons(failures) + [
        r for c, line, g in zip(cells, lines, guards) for r in cell_reasons(c, line, objective, obj_name, guardrails, g)
    ]
    found += [one_arm_reason(c) for c in one_arm]
    found += [baseline_mismatch_reason(cell, detail) for cell, detail in baseline_mismatches]
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
    return out + ([gpu] if gpu else []) + equivalence_warnings(cell)


def crossover_brackets(cells: Sequence[CellComparison], higher_is_better: bool) -> list[Crossover]:
    """Per sampling x segment: the first bracket, by load, of a level where speculation paid and the next where not."""
    groups: dict[tuple[str, str], list[CellComparison]] = defaultdict(list)
    for c in cells:
        groups[(c.sampling, c.segment)].append(c)
    out = []
    for (sampling, segment), group in groups.items():
        group.sort(key=lambda c: c.offered_load)
        last_paid: CellComparison | None = None
        for c in group:
            status = cell_status(c, higher_is_better)
            if status == "better":
                last_paid = c
            elif last_paid is not None and status in ("worse", "no detectable difference"):
                out.append(
                    Crossover(
                        sampling=sampling,
                        segment=segment,
                        paid_traffic=last_paid.traffic,
                        paid_load=last_paid.offered_load,
                        unpaid_traffic=c.traffic,
                        unpaid_load=c.offered_load,
                        unpaid_status=status,
                    )
                )
                break
    return out


def crossovers(cells: Sequence[CellComparison], higher_is_better: bool) -> list[str]:
    """Per sampling x segment: where speculation stops paying, as the interval between two measured loads.

    The crossover lies in [the last load where it paid, the first above it where it did not]; a sweep's
    bisection measures loads inside that bracket, so it narrows as the sweep goes on.
    """
    return [
        f"{x.sampling} / {x.segment}: speculation stops paying at '{x.unpaid_traffic}' (offered load "
        f"{x.unpaid_load:g}): {x.unpaid_status}; it paid at '{x.paid_traffic}' ({x.paid_load:g}): "
        f"the crossover lies between offered load {x.paid_load:g} and {x.unpaid_load:g}"
        for x in crossover_brackets(cells, higher_is_better)
    ]
