"""The verdict's error rates on planted truth, by simulation: false NO-GO from guardrails, and GO on a real win.

Twelve cells, each with P99 E2E and P99 TTFT guardrails and a p95 objective, lognormal latencies. Calling
``compare_percentile`` 24 times per plan for hundreds of plans would take minutes, so the percentile
bootstrap is drawn here from its exact distribution instead: the k-th order statistic of a resample of n
sorted values is the value at ceil(n U) with U ~ Beta(k, n + 1 - k), and the next one follows from a
Beta(1, n - k) step; with numpy's linear interpolation between them this is the bootstrap
``compare_percentile`` runs (a test below checks the two agree). The counts are then compared with what
alpha allows, with a binomial tolerance on the number of plans, and no timings.
"""

import numpy as np
import pytest
from scipy import stats

from specguard.analysis.ab_statistics import RatioResult, compare_percentile, min_samples
from specguard.check.plan import Guardrails, Objective
from specguard.verdict import CellComparison, decide
from specguard.verdict.budget_tests import FAMILY_ALPHA

CELLS = 12
PLANS = 300
RESAMPLES = 300
SIGMA = 0.5


def boot_percentile(x_sorted: np.ndarray, q: float, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Bootstrap replicates of numpy's q-percentile for each row of sorted samples: shape (rows, resamples)."""
    rows, n = x_sorted.shape
    h = (n - 1) * q
    k0 = int(np.floor(h))  # 0-based order statistic
    frac = h - k0
    k = k0 + 1  # 1-based
    u0 = rng.beta(k, n + 1 - k, size=(rows, resamples))
    u1 = u0 + (1 - u0) * rng.beta(1, n - k, size=(rows, resamples)) if k < n else u0
    i0 = np.clip(np.ceil(n * u0).astype(int) - 1, 0, n - 1)
    i1 = np.clip(np.ceil(n * u1).astype(int) - 1, 0, n - 1)
    v0 = np.take_along_axis(x_sorted, i0, axis=1)
    v1 = np.take_along_axis(x_sorted, i1, axis=1)
    return v0 + frac * (v1 - v0)


def ratio_results(scale: float, n: int, q: float, rows: int, rng: np.random.Generator, min_tail: int) -> list[RatioResult]:
    """rows comparisons of baseline vs candidate = scale x baseline in distribution, at the q-percentile."""
    b = np.sort(rng.lognormal(3.0, SIGMA, size=(rows, n)), axis=1)
    c = np.sort(scale * rng.lognormal(3.0, SIGMA, size=(rows, n)), axis=1)
    pb, pc = np.percentile(b, 100 * q, axis=1), np.percentile(c, 100 * q, axis=1)
    ratios = boot_percentile(c, q, rng, RESAMPLES) / boot_percentile(b, q, rng, RESAMPLES)
    lo, hi = np.percentile(ratios, [2.5, 97.5], axis=1)
    enough = n >= min_samples(q, min_tail)
    return [
        RatioResult(
            baseline=float(pb[i]),
            candidate=float(pc[i]),
            ratio=float(pc[i] / pb[i]),
            ci_low=float(lo[i]),
            ci_high=float(hi[i]),
            n_baseline=n,
            n_candidate=n,
            enough_samples=enough,
            more_requests_needed=0 if enough else min_samples(q, min_tail) - n,
            mann_whitney_p=None,
            prob_candidate_lower=None,
            repetition_spread_widened=False,
        )
        for i in range(rows)
    ]


def simulate(
    n: int, guard_scale: float, objective_scale: float, min_tail: int, seed: int, guardrails: Guardrails | None = None
) -> dict[str, int]:
    """Verdicts of PLANS simulated plans, and how many the old rule (against no change, uncorrected) vetoed."""
    rng = np.random.default_rng(seed)
    rows = PLANS * CELLS
    e2e = ratio_results(guard_scale, n, 0.99, rows, rng, min_tail)
    ttft = ratio_results(guard_scale, n, 0.99, rows, rng, min_tail)
    obj = ratio_results(objective_scale, n, 0.95, rows, rng, min_tail)
    guardrails = guardrails or Guardrails()
    counts = {"GO": 0, "NO-GO": 0, "INCONCLUSIVE": 0, "guard_veto": 0, "old_veto": 0}
    budget = guardrails.max_p99_e2e_regression
    for p in range(PLANS):
        cells = [
            CellComparison(
                traffic="steady",
                offered_load=1.0,
                target=True,
                sampling="prod",
                segment=f"s{i}",
                objective=obj[p * CELLS + i],
                p99_e2e=e2e[p * CELLS + i],
                p99_ttft=ttft[p * CELLS + i],
                error_rate_baseline=0.0,
                error_rate_candidate=0.0,
                errors_baseline=0,
                errors_candidate=0,
                requests_baseline=10**6,  # the error guardrail is not under test here
                requests_candidate=10**6,
            )
            for i in range(CELLS)
        ]
        v = decide(cells, Objective(), guardrails)
        counts[v.verdict] += 1
        counts["guard_veto"] += any(r.code == "guardrail_regressed" for r in v.reasons)
        old = [r for c in cells for r in (c.p99_e2e, c.p99_ttft) if r.enough_samples and r.ratio > 1 + budget and r.ci_low > 1]
        counts["old_veto"] += bool(old)
    return counts


def allowed(rate: float) -> int:
    """The most plans out of PLANS that a true rate of ``rate`` gives, bar a 1-in-1000 chance."""
    return int(stats.binom.ppf(0.999, PLANS, rate))


def test_the_fast_bootstrap_is_the_bootstrap_compare_percentile_runs():
    rng = np.random.default_rng(5)
    b, c = rng.lognormal(3, SIGMA, 501), rng.lognormal(3, SIGMA, 501)
    slow = compare_percentile([[[float(x)] for x in b]], [[[float(x)] for x in c]], 0.99, resamples=2000, seed=1)
    rb = boot_percentile(np.sort(b)[None, :], 0.99, rng, 4000)[0]
    rc = boot_percentile(np.sort(c)[None, :], 0.99, rng, 4000)[0]
    lo, hi = np.percentile(rc / rb, [2.5, 97.5])
    assert lo == pytest.approx(slow.ci_low, rel=0.04) and hi == pytest.approx(slow.ci_high, rel=0.04)


@pytest.mark.parametrize(("n", "min_tail"), [(102, 1), (501, 5)])
@pytest.mark.slow  # 6.4 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_unchanged_tails_rarely_veto_a_plan(n, min_tail):
    """Unchanged P99s on both arms, 24 guardrail tests: the family-wise false NO-GO stays within alpha.

    The old rule (against no change, uncorrected) vetoed far more: the issue measured 26 % at 102 and 12 % at 501.
    """
    counts = simulate(n, guard_scale=1.0, objective_scale=0.6, min_tail=min_tail, seed=n)
    assert counts["guard_veto"] <= allowed(FAMILY_ALPHA), counts
    assert counts["old_veto"] > allowed(FAMILY_ALPHA), counts  # the simulation sees an uncontrolled rule


@pytest.mark.slow  # 6.9 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_tails_exactly_at_the_budget_are_vetoed_at_most_alpha_of_the_time():
    """The least favourable truth for a false NO-GO: every P99 exactly 1 + budget, 24 true null hypotheses."""
    counts = simulate(501, guard_scale=1 + Guardrails().max_p99_e2e_regression, objective_scale=0.6, min_tail=5, seed=7)
    assert counts["guard_veto"] <= allowed(FAMILY_ALPHA), counts


@pytest.mark.slow  # 10.8 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_a_planted_win_is_not_vetoed_by_chance():
    """A 40 % win on p95 with unchanged tails. At 501 requests per cell a P99 ratio's interval is wide (lognormal
    sigma 0.5), so 24 of them cannot all be shown within 5 % budgets: INCONCLUSIVE, not NO-GO (the plan's
    requirements say so before a run). Even 40 % budgets gave GO in only 3 of 300 plans when this was
    written: GO needs every one of the 24 intervals inside, which is the price of a rule that cannot be fooled."""
    tight = simulate(501, guard_scale=1.0, objective_scale=0.6, min_tail=5, seed=11)
    assert tight["GO"] == 0 and tight["guard_veto"] <= allowed(FAMILY_ALPHA), tight
    wide = Guardrails(max_p99_e2e_regression=0.4, max_p99_ttft_regression=0.4)
    loose = simulate(501, guard_scale=1.0, objective_scale=0.6, min_tail=5, seed=12, guardrails=wide)
    assert loose["guard_veto"] == 0 and loose["NO-GO"] <= allowed(FAMILY_ALPHA), loose
