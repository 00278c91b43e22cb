"""The power of a window's rank test to see a regression of the budget's size: Noether's formula. Pure.

A window that is "not significantly worse" is evidence of no regression only if the test could have seen one.
So every PASS states the power of its one-sided Mann-Whitney test (van Elteren's, stratified, is
approximated by the same formula on the matched counts) to detect a candidate whose values are the
baseline's times ``1 + budget`` (``1 - budget`` for higher-is-better metrics), at the look's threshold, and
a window whose power is below ``analysis.min_power`` (default 0.8) is INCONCLUSIVE, not PASS (issue 26).

Noether (1987), "Sample size determination for some common nonparametric tests", JASA 82:645-647:

    power = Phi( sqrt(12 n_b n_c / (n_b + n_c + 1)) * (p' - 1/2) - z_{1 - threshold} )

where p' = P(candidate value worse than baseline value) under the alternative. p' is read off the window's
own baseline values (one per request, as the rank test takes them): the share of pairs (i != j) with
(1 + budget) x_i > x_j, ties counted half. Under a log-normal spread sigma it is Phi(ln(1 + budget) / (sigma
sqrt(2))): at sigma 0.27 (per-request mean ITL of chat traffic) and a 10 % budget, p' = 0.60, so a window
needs about 250 requests per pool at Pocock's per-look threshold (0.0014) to reach 80 %; deterministic
servers (sigma 0) give p' = 1 and need about 11.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

__all__ = ["POWER_METHOD", "rank_test_power", "scale_for_power", "shifted_superiority"]

POWER_METHOD = (
    "power: the one-sided rank test's probability of rejecting at this look's threshold if the candidate's values "
    "were the baseline's times (1 + budget), by Noether's formula (JASA 1987) with P(worse) read off the window's "
    "baseline values; a window passes only with power >= min_power"
)


def shifted_superiority(base: Sequence[float], factor: float, sign: float) -> float | None:
    """p' = P(factor * X > Y) for sign > 0 (P(factor * X < Y) for sign < 0), X and Y two different baseline values.

    Exactly over the n (n - 1) ordered pairs of the sample, ties half, in O(n log n). None with fewer than 2 values.
    """
    x = np.sort(np.asarray(base, dtype=float))
    n = len(x)
    if n < 2:
        return None
    shifted = factor * x
    below = np.searchsorted(x, shifted, side="left")
    upto = np.searchsorted(x, shifted, side="right")
    ties = upto - below
    # Each value is also compared with itself in these counts; take that pair out.
    self_below = shifted > x
    self_tie = shifted == x
    if sign > 0:
        wins = below - self_below + 0.5 * (ties - self_tie)
    else:
        self_above = shifted < x
        wins = (n - upto) - self_above + 0.5 * (ties - self_tie)
    return float(np.sum(wins) / (n * (n - 1)))


def _z_sum(threshold: float, target: float) -> float:
    return float(stats.norm.isf(threshold) + stats.norm.ppf(target))


def rank_test_power(p_worse: float, n_baseline: int, n_candidate: int, threshold: float) -> float:
    """Noether's approximate power of the one-sided Mann-Whitney test at ``threshold``."""
    nb, nc = n_baseline, n_candidate
    if nb < 1 or nc < 1:
        return 0.0
    z = math.sqrt(12.0 * nb * nc / (nb + nc + 1)) * (p_worse - 0.5) - float(stats.norm.isf(threshold))
    return float(stats.norm.cdf(z))


def scale_for_power(p_worse: float, n_baseline: int, n_candidate: int, threshold: float, target: float) -> float | None:
    """How many times this window's requests (both pools scaled alike) reach ``target`` power; None if no size can
    (the baseline's values cannot tell the shift: p' <= 1/2).

    Solves 12 s^2 n_b n_c = K (s (n_b + n_c) + 1) for s, with K = ((z_{1-threshold} + z_target) / (p' - 1/2))^2.
    """
    if p_worse <= 0.5 or n_baseline < 1 or n_candidate < 1:
        return None
    k = (_z_sum(threshold, target) / (p_worse - 0.5)) ** 2
    a, b = 12.0 * n_baseline * n_candidate, k * (n_baseline + n_candidate)
    return (b + math.sqrt(b * b + 4.0 * a * k)) / (2.0 * a)
