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

Where the guardrails are tested is the plan's ``guardrails.scope``: ``level``
(the default) tests P99 E2E / TTFT, goodput and greedy divergence once per
traffic level over its cells and the error rate once over the whole check
(``level_guards``); ``cell`` tests every guardrail in every cell
(``cell_guards``). A sequential check (``check --until-decided``) decides at
each look with that look's share of the error (``sequential``): the GO side's
bounds at ``look.alpha_go``, Holm's family at ``look.alpha_nogo``; before the
last look an objective that shows no improvement yet is undecided, not NO-GO.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from specguard.analysis.ab_statistics import RatioResult
from specguard.analysis.definitions import HIGHER_IS_BETTER
from specguard.analysis.gpu_usage import higher_utilisation_warning
from specguard.number_format import fmt_change, fmt_ratio_ci
from specguard.results.models import WarningNote
from specguard.verdict.budget_tests import GO_SIDE_ALPHA, holm, ratio_lower, ratio_upper
from specguard.verdict.cell_guards import cell_guard_tests
from specguard.verdict.guards import GuardTest, equivalence_warnings
from specguard.verdict.level_guards import WHOLE_CHECK, confined_regression_warnings, level_guard_tests
from specguard.verdict.model import (
    SINGLE_LOOK,
    CellComparison,
    CellLine,
    Crossover,
    EquivalenceRule,
    Failure,
    GuardrailRule,
    LevelComparison,
    Look,
    ObjectiveRule,
    OneArmCell,
    Reason,
    ReasonCode,
    Status,
    TestAtLook,
    TestOutcome,
    Undecided,
    Verdict,
    VerdictName,
)


def objective_gain(obj: RatioResult, higher_is_better: bool) -> tuple[float, float, float]:
    """(change, low, high) as fractional improvement: positive is better for the candidate."""
    if higher_is_better:
        return obj.ratio - 1, obj.ci_low - 1, obj.ci_high - 1
    return 1 - obj.ratio, 1 - obj.ci_high, 1 - obj.ci_low


def objective_bounds(obj: RatioResult, higher_is_better: bool, alpha: float = GO_SIDE_ALPHA) -> tuple[float, float, float]:
    """(change, low, high) as ``objective_gain``, the bounds one-sided at ``alpha`` each (the 95 % interval at 2.5 %)."""
    lo, hi = ratio_lower(obj, alpha), ratio_upper(obj, alpha)
    if higher_is_better:
        return obj.ratio - 1, lo - 1, hi - 1
    return 1 - obj.ratio, 1 - hi, 1 - lo


def cell_status(cell: CellComparison, higher_is_better: bool, alpha: float = GO_SIDE_ALPHA) -> Status:
    if not cell.objective.enough_samples:
        return "inconclusive"
    _, low, high = objective_bounds(cell.objective, higher_is_better, alpha)
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


def cell_line(cell: CellComparison, obj_name: str, higher: bool, alpha: float = GO_SIDE_ALPHA) -> CellLine:
    o = cell.objective
    # a ratio with its interval, never "1 - ratio" as a percentage: that once read "-1197516 %"
    text = (
        f"{obj_name} {o.baseline:.2f} -> {o.candidate:.2f} ({fmt_ratio_ci(o.ratio, o.ci_low, o.ci_high)}; {fmt_change(o.ratio)})"
    )
    status = cell_status(cell, higher, alpha)
    return CellLine(traffic=cell.traffic, sampling=cell.sampling, segment=cell.segment, status=status, text=text)


def objective_reason(
    cell: CellComparison, line: CellLine, objective: ObjectiveRule, obj_name: str, look: Look = SINGLE_LOOK
) -> Reason | None:
    """What the objective says at a target cell: None when it improves by the minimum, with confidence.

    Before a sequential check's last look, no detectable improvement (or one below the minimum) is undecided:
    more requests may still show it; at the last look (and in a check of one look) it is NO-GO as ever.
    """
    higher = objective.metric in HIGHER_IS_BETTER
    gain, low, high = objective_bounds(cell.objective, higher, look.alpha_go)
    numbers = {"gain": gain, "ci_low": low, "ci_high": high}
    if not look.final and (
        line.status == "no detectable difference" or (line.status == "better" and gain < objective.min_improvement)
    ):
        text = f"{obj_name} at target {cell.name} not yet decided at look {look.index} of {look.of}: {line.text}"
        return Reason(code="objective_undecided", numbers=numbers, text=text, cell=cell.name, metric=obj_name)
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


def _where(t: GuardTest) -> tuple[str | None, str | None]:
    """(cell, level) of a reason from the test: a cell's name, a traffic level's name, or neither (the whole check)."""
    if t.level is not None:
        return None, t.level
    return (None, None) if t.cell == WHOLE_CHECK else (t.cell, None)


def guard_reason(t: GuardTest, beyond: bool) -> Reason | None:
    """What a guardrail says: beyond its budget (Holm-rejected), straddling it, or None when it holds.

    A test of the NO-GO side alone (a P90/P50 in place of an unresolvable P99, a traffic level's error rate
    beside the whole check's) speaks only when it is beyond: it never holds a GO back.
    """
    if t.nogo_only and not beyond:
        return None
    if t.unverified is not None:
        return t.unverified
    numbers = t.numbers | {"p_value": t.p_beyond}
    lo, hi = t.numbers["ci_low"], t.numbers["ci_high"]
    cell, level = _where(t)
    code: ReasonCode
    unresolved: ReasonCode
    if t.codes is not None and t.what is not None:
        what, (code, unresolved) = t.what, t.codes
        text = f"{t.label} {t.verb} at {t.cell}: {what}"
    elif t.metric == "error_rate":
        b, c = t.numbers["baseline"], t.numbers["candidate"]
        counts = ""
        if "errors_baseline" in t.numbers and "requests_baseline" in t.numbers:
            counts = (
                f" ({t.numbers['errors_baseline']:.0f} / {t.numbers['requests_baseline']:.0f} vs "
                f"{t.numbers['errors_candidate']:.0f} / {t.numbers['requests_candidate']:.0f})"
            )
        what = f"{b:.1%} -> {c:.1%}{counts} (difference 95% CI {lo:+.1%} to {hi:+.1%}), budget +{t.budget:.1%}"
        code, text = "error_rate_rose", f"error rate rose at {t.cell}: {what}"
        unresolved = "error_rate_unresolved"
    else:
        what = f"x{t.numbers['ratio']:.2f} (95% CI x{lo:.2f} to x{hi:.2f}), budget +{t.budget:.0%}"
        code, text = "guardrail_regressed", f"{t.metric} regressed at {t.cell}: {what}"
        unresolved = "guardrail_unresolved"
    if t.note:
        text += f"; {t.note}"
    if beyond:
        return Reason(code=code, cell=cell, level=level, metric=t.metric, numbers=numbers, text=text)
    if t.within:
        return None
    need = t.more_requests_needed
    numbers["more_requests_needed"] = need
    name = t.label or ("error rate" if t.metric == "error_rate" else t.metric)
    text = f"{name} at {t.cell} straddles its budget: {what}; about {need} more requests per arm would resolve it"
    return Reason(code=unresolved, cell=cell, level=level, metric=t.metric, numbers=numbers, text=text)


def guardrail_tests(
    cells: Sequence[CellComparison],
    levels: Sequence[LevelComparison],
    guardrails: GuardrailRule,
    equivalence: EquivalenceRule | None,
    alpha: float,
) -> list[GuardTest]:
    """Every guardrail test of the plan, at the scope it asks: per traffic level and the whole check, or per cell.

    The level scope needs the levels' pooled comparisons; a caller with cells alone gets the cell scope.
    """
    if levels and guardrails.scope == "level":
        return level_guard_tests(levels, cells, guardrails, equivalence, alpha)
    return [t for c in cells for t in cell_guard_tests(c, guardrails, equivalence, alpha)]


def holm_beyond(tests: Sequence[GuardTest], alpha: float) -> dict[int, bool]:
    """Which tests lie beyond their budget, with Holm's correction at ``alpha`` over every test that could be tested."""
    flat = [t for t in tests if t.unverified is None]
    return {id(t): b for t, b in zip(flat, holm([t.p_beyond for t in flat], alpha))}


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


def cell_reasons(cell: CellComparison, obj: Reason | None, guardrails: GuardrailRule, guards: list[Reason]) -> list[Reason]:
    """Everything one cell says against GO, in the order people read it: objective (``objective_reason``, None at a
    cell that is not a target), tails and errors, preemptions."""
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
        "objective_undecided",
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
    levels: Sequence[LevelComparison] = (),
    look: Look = SINGLE_LOOK,
) -> Verdict:
    """The verdict; ``one_arm`` names the cells that only one arm measured (each keeps GO out of reach).

    ``equivalence`` (the plan's ``equivalence:``) makes greedy-output divergence a guardrail when it says so;
    its warning is given either way. ``baseline_mismatches``: (cell, what differs) for cells whose imported
    baseline proved, once the candidate ran, not to be of the same prompts; like a one-arm cell, no GO.
    ``levels``: each traffic level's pooled comparison, for ``guardrails.scope: level``. ``look``: which look of a
    sequential check this is, and its share of the error rates (one look at the fixed levels by default).
    """
    higher = objective.metric in HIGHER_IS_BETTER
    obj_name = f"{objective.percentile} {objective.metric}"
    lines = [cell_line(c, obj_name, higher, look.alpha_go) for c in cells]
    level_scope = bool(levels) and guardrails.scope == "level"
    tests = guardrail_tests(cells, levels if level_scope else (), guardrails, equivalence, look.alpha_go)
    beyond = holm_beyond(tests, look.alpha_nogo)
    by_test = [(t, guard_reason(t, beyond.get(id(t), False))) for t in tests]
    per_cell: dict[str, list[Reason]] = defaultdict(list)
    pooled: list[Reason] = []
    for t, r in by_test:
        if r is not None:
            (per_cell[t.cell] if t.level is None and t.cell != WHOLE_CHECK else pooled).append(r)
    objective_reasons = {
        c.name: objective_reason(c, line, objective, obj_name, look) for c, line in zip(cells, lines) if c.target
    }
    found = failure_reasons(failures) + [
        r for c in cells for r in cell_reasons(c, objective_reasons.get(c.name), guardrails, per_cell[c.name])
    ]
    found += pooled
    found += [one_arm_reason(c) for c in one_arm]
    found += [baseline_mismatch_reason(cell, detail) for cell, detail in baseline_mismatches]
    nogo = [r for r in found if not is_unsure(r)]
    # every reason stays as data (verdict.json); the renderers group them (verdict.reason_groups)
    unsure = [r for r in found if is_unsure(r)]
    verdict, reasons = verdict_and_reasons(nogo, unsure, bool(cells), go_reason(obj_name, objective))
    warnings = [w for c in cells for w in cell_warnings(c)]
    notes = {n.text: n for c in cells for n in cell_warning_notes(c)}  # one per sentence, as warnings are
    if level_scope:
        warnings += confined_regression_warnings(cells, guardrails)
    return Verdict(
        verdict=verdict,
        reasons=reasons,
        lines=lines,
        warnings=sorted(set(warnings), key=warnings.index),
        warning_notes=list(notes.values()),
        crossover=crossovers(cells, higher),
        objective=obj_name,
        tests=tests_at_look(cells, objective_reasons, obj_name, higher, look, by_test, beyond),
        undecided=undecided_traffic(cells, objective_reasons, by_test, beyond) if verdict == "INCONCLUSIVE" else [],
    )


def tests_at_look(
    cells: Sequence[CellComparison],
    objective_reasons: dict[str, Reason | None],
    obj_name: str,
    higher: bool,
    look: Look,
    by_test: Sequence[tuple[GuardTest, Reason | None]],
    beyond: dict[int, bool],
) -> list[TestAtLook]:
    """Every test as it stood: the objective at each target cell, then each guardrail, for a look's record."""
    out = []
    outcome: TestOutcome
    for c in cells:
        if c.name not in objective_reasons:
            continue
        r = objective_reasons[c.name]
        lo, hi = ratio_lower(c.objective, look.alpha_go), ratio_upper(c.objective, look.alpha_go)
        outcome = "within" if r is None else ("undecided" if is_unsure(r) else "beyond")
        out.append(TestAtLook(name=f"{obj_name} at {c.name}", ci_low=lo, ci_high=hi, outcome=outcome))
    for t, _ in by_test:
        if t.unverified is not None:
            out.append(TestAtLook(name=f"{t.metric} at {t.cell}", outcome="undecided"))
            continue
        hit = beyond.get(id(t), False)
        outcome = "beyond" if hit else ("within" if t.within and not t.nogo_only else "undecided")
        if t.nogo_only and not hit:
            outcome = "within" if t.p_beyond > 0.5 else "undecided"
        out.append(
            TestAtLook(
                name=f"{t.metric} at {t.cell}",
                ci_low=t.numbers.get("ci_low"),
                ci_high=t.numbers.get("ci_high"),
                p_value=t.p_beyond,
                outcome=outcome,
            )
        )
    return out


def undecided_traffic(
    cells: Sequence[CellComparison],
    objective_reasons: dict[str, Reason | None],
    by_test: Sequence[tuple[GuardTest, Reason | None]],
    beyond: dict[int, bool],
) -> list[Undecided]:
    """The (traffic level, sampling) blocks whose tests more requests could still decide; a level's guardrail: all samplings."""
    by_name = {c.name: c for c in cells}
    whole: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    for name, r in objective_reasons.items():
        if r is not None and is_unsure(r):
            pairs.add((by_name[name].traffic, by_name[name].sampling))
    for t, r in by_test:
        if r is None or not is_unsure(r) or beyond.get(id(t), False):
            continue
        if t.level is not None:
            whole.add(t.level)
        elif t.cell == WHOLE_CHECK:
            whole |= {c.traffic for c in cells}
        elif t.cell in by_name:
            pairs.add((by_name[t.cell].traffic, by_name[t.cell].sampling))
    order = list(dict.fromkeys(c.traffic for c in cells))
    out = [Undecided(traffic=lv) for lv in order if lv in whole]
    out += [
        Undecided(traffic=tr, sampling=sm) for tr, sm in sorted(pairs, key=lambda p: (order.index(p[0]), p[1])) if tr not in whole
    ]
    return out


def cell_warnings(cell: CellComparison) -> list[str]:
    # Client warnings belong to whole runs, shared by the segments of a cell.
    out = [f"{cell.traffic} / {cell.sampling}: {w}" for w in cell.client_warnings]
    return out + [n.text for n in server_side_notes(cell)] + equivalence_warnings(cell)


def cell_warning_notes(cell: CellComparison) -> list[WarningNote]:
    """The cell's warnings of known kinds as data: its runs' client warnings ('where' the arm), then the server side's."""
    at = f"{cell.traffic} / {cell.sampling}"
    client = [n.model_copy(update={"text": f"{at}: {n.text}", "where": f"{at} / {n.where}"}) for n in cell.client_notes]
    return client + server_side_notes(cell)


def server_side_notes(cell: CellComparison) -> list[WarningNote]:
    """Low acceptance, KV-cache usage or waiting requests risen on the candidate, its GPUs busier: made here as data."""
    out: list[WarningNote] = []
    if cell.acceptance_rate is not None and cell.acceptance_rate < 0.5:
        text = f"{cell.name}: acceptance rate {cell.acceptance_rate:.2f} < 0.5, speculation is likely net-negative"
        rate = round(cell.acceptance_rate, 2)
        out.append(WarningNote(kind="low_acceptance", text=text, value=rate, limit=0.5, where=cell.name))
    for kind, what, b, c in (
        ("kv_usage_rose", "KV-cache usage", cell.kv_usage_baseline, cell.kv_usage_candidate),
        ("waiting_rose", "waiting requests", cell.waiting_baseline, cell.waiting_candidate),
    ):
        if b is not None and c is not None and c > b * 1.2 + 0.01:
            text = f"{cell.name}: {what} rose on the candidate ({b:.3f} -> {c:.3f} mean)"
            out.append(WarningNote(kind=kind, text=text, value=round(c, 3), where=cell.name))
    gpu = higher_utilisation_warning(
        cell.name, cell.gpu_util_baseline, cell.gpu_util_candidate, cell.tokens_per_s_baseline, cell.tokens_per_s_candidate
    )
    if gpu is not None and cell.gpu_util_candidate is not None:
        out.append(WarningNote(kind="gpu_busier", text=gpu, value=round(cell.gpu_util_candidate), where=cell.name))
    return out


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
    return [crossover_text(x) for x in crossover_brackets(cells, higher_is_better)]


def crossover_text(x: Crossover) -> str:
    return (
        f"{x.sampling} / {x.segment}: speculation stops paying at '{x.unpaid_traffic}' (offered load "
        f"{x.unpaid_load:g}): {x.unpaid_status}; it paid at '{x.paid_traffic}' ({x.paid_load:g}): "
        f"the crossover lies between offered load {x.paid_load:g} and {x.unpaid_load:g}"
    )
