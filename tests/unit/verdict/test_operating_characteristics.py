"""The verdict rule's operating characteristics, by simulation, not by argument (issue 25, section 2).

Thousands of synthetic checks are drawn from known distributions (``verdict.simulate``: lognormal
requests, each statistic from its large-sample distribution, binomial errors) and decided by ``decide``
alone, no servers. The layout is the demo's: three traffic levels (one target) x two samplings x two
segments = 12 cells, default guardrails (P99 E2E and TTFT +5 % per level, error rate +1 point over the
check), objective p95 ITL at a 10 % minimum improvement. Every draw is seeded: a count below moves only
when the rule does. The counts are in docs/check.md ("Operating characteristics, by simulation") too.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from specguard.verdict.power import Effect, Spreads, level_size
from specguard.verdict.simulate import Layout, Truth, run_sequential, synthetic_verdicts

LAYOUT = Layout()
CELLS_PER_LEVEL = len(LAYOUT.samplings) * len(LAYOUT.segments)


def _sized_per_cell() -> int:
    """Section 3's size for the default assumed effect (objective 2 x 10 %, guardrails unchanged), defaults spreads."""
    sizes = [
        level_size(
            lv, CELLS_PER_LEVEL, lv in LAYOUT.targets, len(LAYOUT.levels), Effect(0.20), 0.10, (0.05, 0.05), Spreads(), 0.95, 5
        )
        for lv in LAYOUT.levels
    ]
    return max(s.per_cell for s in sizes)


SIZED = _sized_per_cell()


def _counts(truth: Truth, per_cell: int, draws: int, seed: int) -> Counter[str]:
    return Counter(v.verdict for v in synthetic_verdicts(LAYOUT, truth, per_cell, draws, seed=seed))


def test_the_sizing_is_what_the_draws_run_at():
    # 4,240 per arm and cell with the default spreads: 16,960 per level, 50,880 per arm for the check
    assert SIZED * CELLS_PER_LEVEL * len(LAYOUT.levels) > 10_000  # the default spreads are the CPU demo's, wide


@pytest.mark.parametrize("per_cell", [48, SIZED])
@pytest.mark.slow  # 7.9 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_identical_arms_never_go(per_cell):
    counts = _counts(Truth("identical"), per_cell, 1000, seed=11)
    assert counts["GO"] <= 25, counts  # at most 2.5 % of 1,000


@pytest.mark.slow  # 7.5 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_a_candidate_exactly_at_every_line_goes_at_most_2_5_percent():
    # the least favourable truth of the GO side: the objective exactly 10 % better, both P99s exactly +5 %
    truth = Truth("at the lines", objective_ratio=0.90, e2e_ratio=1.05, ttft_ratio=1.05)
    counts = _counts(truth, SIZED, 1000, seed=12)
    assert counts["GO"] <= 25, counts


@pytest.mark.slow  # 12 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_five_percent_errors_against_none_is_no_go_at_576_requests_per_arm():
    # the scenario: a 40 % win whose candidate answers 5 % of its requests with HTTP 500; 48 per cell
    truth = Truth("errors", objective_ratio=0.60, e2e_ratio=0.75, error_candidate=0.05)
    counts = _counts(truth, 48, 600, seed=13)
    assert counts["NO-GO"] >= 0.95 * 600, counts


@pytest.mark.slow  # 8.1 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_a_40_percent_win_with_equal_tails_goes_at_least_80_percent_at_the_sized_budget():
    truth = Truth("win", objective_ratio=0.60)  # P99 E2E and TTFT unchanged: they must be shown within +5 %
    counts = _counts(truth, SIZED, 1500, seed=14)
    assert counts["GO"] >= 0.80 * 1500, counts
    assert counts["NO-GO"] <= 0.025 * 1500, counts  # an unchanged P99 vetoes a true win rarely


@pytest.mark.slow  # 17 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_sequential_looks_keep_identical_arms_from_go_and_reach_go_on_the_win():
    rng = np.random.default_rng(15)
    budget = 2 * SIZED * len(LAYOUT.cells)  # the plan's sequential.max_requests_per_arm: twice the fixed size
    per_rep = SIZED // 4  # four planned repetitions make the fixed size
    same = Counter(run_sequential(LAYOUT, Truth("identical"), per_rep, budget, rng).verdict for _ in range(60))
    assert same["GO"] == 0, same
    win = [run_sequential(LAYOUT, Truth("win", objective_ratio=0.60), per_rep, budget, rng) for _ in range(60)]
    wins = Counter(o.verdict for o in win)
    assert wins["GO"] >= 0.80 * 60, wins
    assert all(o.requests_per_arm <= budget for o in win)
