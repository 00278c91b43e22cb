"""Guardrails tested in every cell (``guardrails.scope: cell``, and the fallback for callers without level pools). Pure.

Each cell (traffic level x sampling setting x prompt segment) gets its own
P99 E2E, P99 TTFT and error-rate tests, and goodput and greedy-output tests
when the plan asks. This was the only rule before the level scope; at the
sizes people run it rarely resolves (a P99 of about 100 requests, a 1-point
error budget on 30 requests per arm: see ``level_guards``), so it is the
plan's choice (``scope: cell``) for deployments that must hold every segment
to the budget on its own.
"""

from __future__ import annotations

from specguard.analysis.ab_statistics import RatioResult
from specguard.verdict.budget_tests import (
    GO_SIDE_ALPHA,
    error_difference_interval,
    error_p_beyond,
    ratio_p_beyond,
    ratio_upper,
    requests_to_resolve,
    z_one_sided,
)
from specguard.verdict.guards import GuardTest, equivalence_guard, error_advice, goodput_guard
from specguard.verdict.model import CellComparison, EquivalenceRule, GuardrailRule, Reason

__all__ = ["cell_guard_tests", "error_counts", "error_guard", "ratio_guard"]


def ratio_guard(name: str, r: RatioResult, budget: float, where: str, alpha: float = GO_SIDE_ALPHA) -> GuardTest:
    """A P99 guardrail as a test of "ratio <= 1 + budget"; its GO side is the upper bound at one-sided ``alpha``."""
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
    within = ratio_upper(r, alpha) <= limit
    return GuardTest(where, name, budget, ratio_p_beyond(r, limit), within, numbers, requests_to_resolve(r, limit))


def error_counts(cell: CellComparison) -> tuple[tuple[int, int], tuple[int, int]]:
    """(errors, requests) per arm; a cell without counts (older inputs) takes them from its rates and P99 E2E sizes."""
    eb, nb, ec, nc = cell.errors_baseline, cell.requests_baseline, cell.errors_candidate, cell.requests_candidate
    if eb is not None and nb is not None and ec is not None and nc is not None:
        return (eb, nb), (ec, nc)
    nb, nc = cell.p99_e2e.n_baseline, cell.p99_e2e.n_candidate
    return (round(cell.error_rate_baseline * nb), nb), (round(cell.error_rate_candidate * nc), nc)


def error_guard(cell: CellComparison, budget: float, alpha: float = GO_SIDE_ALPHA) -> GuardTest:
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
    go_high = hi if alpha == GO_SIDE_ALPHA else error_difference_interval((eb, nb), (ec, nc), z_one_sided(alpha))[1]
    return GuardTest(cell.name, "error_rate", budget, p, go_high <= budget, numbers, error_advice(lo, hi, budget, min(nb, nc)))


def cell_guard_tests(
    cell: CellComparison, guardrails: GuardrailRule, equivalence: EquivalenceRule | None = None, alpha: float = GO_SIDE_ALPHA
) -> list[GuardTest]:
    """The cell's guardrail tests: P99 E2E, P99 TTFT, error rate; goodput and greedy outputs when the plan asks."""
    tests = [
        ratio_guard("P99 E2E", cell.p99_e2e, guardrails.max_p99_e2e_regression, cell.name, alpha),
        ratio_guard("P99 TTFT", cell.p99_ttft, guardrails.max_p99_ttft_regression, cell.name, alpha),
        error_guard(cell, guardrails.max_error_rate_increase, alpha),
    ]
    if guardrails.max_goodput_drop is not None and (g := goodput_guard(cell, guardrails.max_goodput_drop, alpha)) is not None:
        tests.append(g)
    if equivalence is not None and equivalence.guardrail:
        if (e := equivalence_guard(cell, equivalence.max_extra_divergence, alpha)) is not None:
            tests.append(e)
    return tests
