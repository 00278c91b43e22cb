"""Guardrails where the evidence is (``guardrails.scope: level``, the default): per traffic level, and over the check. Pure.

Why. The checklist asks "does P99 E2E / TTFT regress at this load?", and the
error rate is one property of the deployment. Testing each in every cell (a
traffic level x sampling setting x prompt segment) asked a P99 of about 100
requests and a 1-point error budget of 30 requests per arm: a 40 % faster
candidate came out INCONCLUSIVE (every cell's 0-error interval straddled the
budget), and one that failed 19 of 360 requests came out INCONCLUSIVE too
(30 requests a cell resolve nothing, and Holm over every cell's test took
what was left). So, by default:

- P99 E2E and P99 TTFT are tested once per traffic level, over all its cells
  together: a stratified bootstrap that keeps each cell's weight
  (``analysis.ab_statistics.compare_pooled_percentile``), the tail rule
  (``min_tail_samples``) counting the level's pooled requests. A cell whose
  own interval lies wholly beyond the budget is named in a warning (a
  regression confined to one segment); ``scope: cell`` makes it NO-GO.
- Where a level's P99 is not yet resolvable, the NO-GO side also tests the
  highest percentile that is (P90, else P50) against the same budget, in the
  same Holm family: the tail rule stops a claim that a few samples cannot
  support, and must not turn a regression every percentile shows into
  INCONCLUSIVE. A GO still needs the P99 itself.
- The error rate is tested once over the whole check, stratified by cell
  (``verdict.stratified``: Mantel-Haenszel weights, Miettinen-Nurminen's score
  interval): its upper bound within the budget is the GO side. The NO-GO side
  tests it over the check and per traffic level (errors that appear only
  under burst load are a NO-GO at that level), every test in the Holm family.
- Goodput (its cells' log ratios pooled with inverse-variance weights, a
  fixed-effect estimate) and the greedy-output divergence (stratified like
  the error rate) are tested per traffic level the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from specguard.analysis.ab_statistics import RatioResult
from specguard.verdict.budget_tests import (
    GO_SIDE_ALPHA,
    ratio_p_beyond,
    ratio_upper,
    requests_to_resolve,
    z_one_sided,
)
from specguard.verdict.cell_guards import error_counts
from specguard.verdict.guards import DIVERGENCE, GuardTest, divergence_counts, error_advice, goodput_test
from specguard.verdict.model import CellComparison, EquivalenceRule, GuardrailRule, LevelComparison, Reason
from specguard.verdict.stratified import Stratum, stratified_difference, stratified_p_beyond

__all__ = [
    "LEVEL_PERCENTILES",
    "WHOLE_CHECK",
    "confined_regression_warnings",
    "error_strata",
    "level_guard_tests",
    "level_where",
    "ratio_test",
]

WHOLE_CHECK = "the whole check"
# The percentiles a traffic level's latency guardrails are compared at (check.aggregate): P99, and where it is not
# yet resolvable, the highest that is (NO-GO side only, FALLBACK_PERCENTILES).
LEVEL_PERCENTILES = {"p99": 0.99, "p90": 0.90, "p50": 0.50}
FALLBACK_PERCENTILES = ("p90", "p50")


def level_where(traffic: str) -> str:
    return f"level '{traffic}'"


def ratio_test(name: str, r: RatioResult, budget: float, where: str, alpha: float, level: str | None = None) -> GuardTest:
    """A latency guardrail as a test of "ratio <= 1 + budget", at a cell (``level`` None) or a traffic level."""
    numbers = {"ratio": r.ratio, "ci_low": r.ci_low, "ci_high": r.ci_high, "budget": budget}
    if not r.enough_samples:
        per_arm = min(r.n_baseline, r.n_candidate)
        reason = Reason(
            code="guardrail_unverified",
            cell=None if level else where,
            level=level,
            metric=name,
            numbers={"requests_per_arm": per_arm, "more_requests_needed": r.more_requests_needed},
            text=f"{name} at {where} unverified: {per_arm} requests per arm, {r.more_requests_needed} more needed",
        )
        return GuardTest(where, name, budget, 1.0, False, numbers, r.more_requests_needed, reason, level=level)
    limit = 1 + budget
    within = ratio_upper(r, alpha) <= limit
    return GuardTest(where, name, budget, ratio_p_beyond(r, limit), within, numbers, requests_to_resolve(r, limit), level=level)


def _resolvable(r: RatioResult) -> bool:
    return r.enough_samples and all(math.isfinite(x) and x > 0 for x in (r.ratio, r.ci_low, r.ci_high))


def _latency_tests(level: LevelComparison, guardrails: GuardrailRule, alpha: float) -> list[GuardTest]:
    where = level_where(level.traffic)
    out = []
    for label, table, budget in (
        ("E2E", level.e2e, guardrails.max_p99_e2e_regression),
        ("TTFT", level.ttft, guardrails.max_p99_ttft_regression),
    ):
        p99 = ratio_test(f"P99 {label}", table["p99"], budget, where, alpha, level.traffic)
        out.append(p99)
        if p99.unverified is None:
            continue
        fallback = next((q for q in FALLBACK_PERCENTILES if q in table and _resolvable(table[q])), None)
        if fallback is not None:
            r99 = table["p99"]
            note = (
                f"P99 {label} is not yet resolvable there ({min(r99.n_baseline, r99.n_candidate)} requests per arm, "
                f"{r99.more_requests_needed} more needed), so {fallback.upper()} {label} was tested against the same budget"
            )
            t = ratio_test(f"{fallback.upper()} {label}", table[fallback], budget, where, alpha, level.traffic)
            out.append(replace(t, nogo_only=True, note=note))
    return out


def error_strata(cells: Sequence[CellComparison]) -> list[Stratum]:
    """(errors, requests) per arm of every cell: the error rate's strata."""
    return [error_counts(c) for c in cells]


def _totals(strata: Sequence[Stratum]) -> dict[str, float]:
    eb, nb = sum(s[0][0] for s in strata), sum(s[0][1] for s in strata)
    ec, nc = sum(s[1][0] for s in strata), sum(s[1][1] for s in strata)
    return {
        "errors_baseline": eb,
        "requests_baseline": nb,
        "errors_candidate": ec,
        "requests_candidate": nc,
        "baseline": eb / nb if nb else 0.0,
        "candidate": ec / nc if nc else 0.0,
    }


def stratified_test(
    strata: Sequence[Stratum], budget: float, where: str, metric: str, alpha: float, level: str | None, nogo_only: bool
) -> GuardTest:
    """A rise of a share (errors, divergent outputs) over strata as a test of "pooled difference <= budget"."""
    numbers = _totals(strata) | {"budget": budget, "strata": len(strata)}
    nb, nc = int(numbers["requests_baseline"]), int(numbers["requests_candidate"])
    if nb == 0 or nc == 0:
        reason = Reason(
            code="guardrail_unverified",
            level=level,
            metric=metric,
            numbers={"requests_per_arm": min(nb, nc), "more_requests_needed": 0},
            text=f"{metric.replace('_', ' ')} at {where} unverified: an arm without requests",
        )
        return GuardTest(where, metric, budget, 1.0, False, numbers, 0, reason, level=level, nogo_only=nogo_only)
    est, lo, hi = stratified_difference(strata)
    numbers |= {"difference": est, "ci_low": lo, "ci_high": hi}
    within = (hi if alpha == GO_SIDE_ALPHA else stratified_difference(strata, z_one_sided(alpha))[2]) <= budget
    return GuardTest(
        where,
        metric,
        budget,
        stratified_p_beyond(strata, budget),
        within,
        numbers,
        error_advice(lo, hi, budget, min(nb, nc) // max(len(strata), 1)) * max(len(strata), 1),
        level=level,
        nogo_only=nogo_only,
    )


def _divergence_test(cells: Sequence[CellComparison], budget: float, alpha: float, level: str) -> GuardTest | None:
    compared = [divergence_counts(c.equivalence) for c in cells if c.equivalence is not None]
    if not compared:
        return None
    t = stratified_test(compared, budget, level_where(level), DIVERGENCE, alpha, level, nogo_only=False)
    if t.unverified is not None:
        return t
    n = t.numbers
    what = (
        f"{n['errors_baseline']:.0f}/{n['requests_baseline']:.0f} baseline outputs differ from the reference (its own "
        f"variation), {n['errors_candidate']:.0f}/{n['requests_candidate']:.0f} candidate outputs (pooled difference "
        f"95% CI {n['ci_low']:+.1%} to {n['ci_high']:+.1%}), budget +{budget:.1%}"
    )
    return replace(
        t,
        what=what,
        codes=("output_diverged", "output_divergence_unresolved"),
        label="greedy-output divergence",
        verb="rose",
    )


def level_guard_tests(
    levels: Sequence[LevelComparison],
    cells: Sequence[CellComparison],
    guardrails: GuardrailRule,
    equivalence: EquivalenceRule | None,
    alpha: float,
) -> list[GuardTest]:
    """Every test of the level scope: the error rate over the check, then each level's tests."""
    tests = [
        stratified_test(error_strata(cells), guardrails.max_error_rate_increase, WHOLE_CHECK, "error_rate", alpha, None, False)
    ]
    for lv in levels:
        at = [c for c in cells if c.traffic == lv.traffic]
        tests += _latency_tests(lv, guardrails, alpha)
        if len(levels) > 1 and at:  # with one level this is the whole check's test again
            tests.append(
                stratified_test(
                    error_strata(at),
                    guardrails.max_error_rate_increase,
                    level_where(lv.traffic),
                    "error_rate",
                    alpha,
                    lv.traffic,
                    True,
                )
            )
        if guardrails.max_goodput_drop is not None and lv.goodput is not None:
            tests.append(goodput_test(lv.goodput, level_where(lv.traffic), guardrails.max_goodput_drop, alpha, lv.traffic))
        if equivalence is not None and equivalence.guardrail:
            if (d := _divergence_test(at, equivalence.max_extra_divergence, alpha, lv.traffic)) is not None:
                tests.append(d)
    return tests


def confined_regression_warnings(cells: Sequence[CellComparison], guardrails: GuardrailRule) -> list[str]:
    """Cells whose own P99 interval lies wholly beyond the budget: a regression confined to one segment (a warning)."""
    out = []
    for c in cells:
        for name, r, budget in (
            ("P99 E2E", c.p99_e2e, guardrails.max_p99_e2e_regression),
            ("P99 TTFT", c.p99_ttft, guardrails.max_p99_ttft_regression),
        ):
            if r.enough_samples and r.ci_low > 1 + budget:
                out.append(
                    f"{c.name}: {name} x{r.ratio:.2f} (95% CI x{r.ci_low:.2f} to x{r.ci_high:.2f}) lies wholly beyond "
                    f"its +{budget:.0%} budget in this cell alone (a regression confined to one segment; "
                    "guardrails.scope: cell makes it NO-GO)"
                )
    return out
