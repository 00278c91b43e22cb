"""One guardrail of one cell as a test against its budget, and the guardrails a plan adds: goodput, greedy outputs. Pure.

The goodput drop is the ratio's non-inferiority test from below (the interval
must stay at or above 1 - budget); the greedy-output divergence is the error
rate's two-proportion test: the candidate's share of outputs that differ from
the baseline's reference minus the baseline's own share (see
``analysis.equivalence``), against ``max_extra_divergence``. Both join the Holm
family of ``decide.holm_beyond``.

The warning rule (always, guardrail or not): the candidate's divergence share
rose over the baseline's own when the 95 % Newcombe interval of the difference
lies wholly above zero (one-sided 2.5 %, per cell, uncorrected: a warning
never changes the verdict). Where the baseline's own variation could not be
measured (one baseline request per prompt: one repetition), any candidate
divergence is a warning that says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specguard.analysis.ab_statistics import RatioResult
from specguard.analysis.equivalence import SegmentEquivalence
from specguard.analysis.slo import goodput_guardrail
from specguard.verdict.budget_tests import (
    GO_SIDE_ALPHA,
    MAX_ADVICE,
    error_difference_interval,
    error_p_beyond,
    ratio_lower,
    ratio_p_below,
    requests_to_resolve,
    z_one_sided,
)
from specguard.verdict.model import CellComparison, Reason, ReasonCode

__all__ = [
    "DIVERGENCE",
    "GuardTest",
    "divergence_counts",
    "equivalence_guard",
    "equivalence_warnings",
    "error_advice",
    "goodput_guard",
    "goodput_test",
]

DIVERGENCE = "output_divergence"


@dataclass(frozen=True)
class GuardTest:
    """One guardrail of one cell tested against its budget: a member of the family Holm corrects over.

    ``what``, ``codes`` (beyond, straddling) and ``label`` describe guardrails other than the P99 ratios and the
    error rate, whose texts ``decide.guard_reason`` writes itself.
    """

    cell: str
    metric: str
    budget: float
    p_beyond: float  # one-sided p of "within the budget": small when it is beyond
    within: bool  # the GO side: the interval's upper end lies within the budget
    numbers: dict[str, float]
    more_requests_needed: int
    unverified: Reason | None = None  # too few samples for any test
    what: str | None = None
    codes: tuple[ReasonCode, ReasonCode] | None = None
    label: str = ""
    verb: str = ""
    level: str | None = None  # a traffic level's test (``cell`` then says "level 'NAME'")
    nogo_only: bool = False  # a test of the NO-GO side alone: it never holds a GO back (a GO needs its own test)
    note: str = ""  # why the test is there, said in its NO-GO reason (a fallback percentile)


def error_advice(lo: float, hi: float, budget: float, n: int) -> int:
    """More requests per arm that would move a difference's interval off the budget (half-width as 1/sqrt(n))."""
    d = abs((hi + lo) / 2 - budget)
    if d == 0:
        return MAX_ADVICE
    return min(max(math.ceil(n * ((hi - lo) / 2 / d) ** 2) - n, 0), MAX_ADVICE)


def goodput_guard(cell: CellComparison, max_drop: float, alpha: float = GO_SIDE_ALPHA) -> GuardTest | None:
    """Goodput may fall by at most ``max_drop``; None when the cell has no goodput (no ``slo:``)."""
    r = cell.metrics.get("goodput", {}).get("rate")
    return None if r is None else goodput_test(r, cell.name, max_drop, alpha)


def goodput_test(r: RatioResult, where: str, max_drop: float, alpha: float, level: str | None = None) -> GuardTest:
    """The goodput ratio ``r`` at ``where`` (a cell, or a level's pooled ratio) as a test of "ratio >= 1 - max_drop"."""
    g = goodput_guardrail(r, max_drop)
    numbers = {"ratio": r.ratio, "ci_low": r.ci_low, "ci_high": r.ci_high, "budget": max_drop, "bound": g.bound}
    if g.status == "undersampled":
        reason = Reason(
            code="guardrail_unverified",
            cell=None if level else where,
            level=level,
            metric="goodput",
            numbers={"more_requests_needed": r.more_requests_needed},
            text=f"goodput at {where} unverified: {g.text}",
        )
        return GuardTest(where, "goodput", max_drop, 1.0, False, numbers, r.more_requests_needed, reason, level=level)
    what = f"x{r.ratio:.2f} (95% CI x{r.ci_low:.2f} to x{r.ci_high:.2f}), budget x{g.bound:.2f}"
    return GuardTest(
        where,
        "goodput",
        max_drop,
        ratio_p_below(r, g.bound),
        ratio_lower(r, alpha) >= g.bound,
        numbers,
        requests_to_resolve(r, g.bound),
        what=what,
        codes=("goodput_dropped", "goodput_unresolved"),
        label="goodput",
        verb="dropped",
        level=level,
    )


def divergence_counts(eq: SegmentEquivalence) -> tuple[tuple[int, int], tuple[int, int]]:
    """(differing, compared) for the baseline's own variation and for the candidate."""
    return (eq.baseline.differing, eq.baseline.compared), (eq.candidate.differing, eq.candidate.compared)


def _shown(eq: SegmentEquivalence, lo: float | None = None, hi: float | None = None) -> str:
    (db, nb), (dc, nc) = divergence_counts(eq)
    text = f"{db}/{nb} baseline outputs differ from the reference (its own variation), {dc}/{nc} candidate outputs"
    if lo is not None and hi is not None:
        text += f" (difference 95% CI {lo:+.1%} to {hi:+.1%})"
    if eq.candidate.first_divergence_median is not None:
        text += f"; candidate first divergence at {eq.unit} {eq.candidate.first_divergence_median:g} (median)"
    return text


def equivalence_guard(cell: CellComparison, budget: float, alpha: float = GO_SIDE_ALPHA) -> GuardTest | None:
    """The candidate's divergence share may exceed the baseline's own by at most ``budget``; None: not compared here."""
    eq = cell.equivalence
    if eq is None:
        return None
    (db, nb), (dc, nc) = divergence_counts(eq)
    numbers: dict[str, float] = {"baseline": db / nb if nb else 0.0, "candidate": dc / nc if nc else 0.0, "budget": budget}
    if nb == 0 or nc == 0:
        text = (
            f"greedy-output divergence at {cell.name} unverified: {nb} baseline and {nc} candidate comparisons "
            "(the baseline's own variation needs a prompt sent twice: repetitions >= 2)"
        )
        reason = Reason(code="guardrail_unverified", cell=cell.name, metric=DIVERGENCE, numbers=numbers, text=text)
        return GuardTest(cell.name, DIVERGENCE, budget, 1.0, False, numbers, 0, reason)
    lo, hi = error_difference_interval((db, nb), (dc, nc))
    numbers |= {"ci_low": lo, "ci_high": hi, "differing_baseline": db, "differing_candidate": dc}
    numbers |= {"compared_baseline": nb, "compared_candidate": nc}
    return GuardTest(
        cell.name,
        DIVERGENCE,
        budget,
        error_p_beyond((db, nb), (dc, nc), budget),
        error_difference_interval((db, nb), (dc, nc), z_one_sided(alpha))[1] <= budget,
        numbers,
        error_advice(lo, hi, budget, min(nb, nc)),
        what=f"{_shown(eq, lo, hi)}, budget +{budget:.1%}",
        codes=("output_diverged", "output_divergence_unresolved"),
        label="greedy-output divergence",
        verb="rose",
    )


def equivalence_warnings(cell: CellComparison) -> list[str]:
    """The warning rule of the module docstring, and the text fallback's note."""
    eq = cell.equivalence
    if eq is None:
        return []
    out = [f"{cell.name}: {eq.note}"] if eq.note else []
    (db, nb), (dc, nc) = divergence_counts(eq)
    if nc == 0 or dc == 0:
        return out
    if nb == 0:
        out.append(
            f"{cell.name}: greedy outputs differ on the candidate ({_shown(eq)}); the baseline's own variation "
            "was not measured (one baseline request per prompt)"
        )
        return out
    lo, hi = error_difference_interval((db, nb), (dc, nc))
    if lo > 0:
        out.append(f"{cell.name}: greedy outputs diverge more on the candidate than the baseline varies: {_shown(eq, lo, hi)}")
    return out
