"""Sizing by power: the requests per arm a GO needs, per traffic level, for an assumed true effect. Pure.

A GO is an intersection: the objective must beat its minimum with confidence at every target cell, and
every guardrail must lie within its budget (P99 E2E and TTFT per traffic level, the error rate over the
whole check). Its probability is at least the product of each test's own power (the tests share data
only positively: a lucky draw helps them all), so the sizing asks each traffic level to pass with
``power ** (1 / levels)`` and multiplies: conservative, never optimistic.

Each latency statistic's log is taken as normal with the sd of a sample quantile of lognormal requests
(``quantile_sd_factor``; the Bahadur representation, Serfling 1980, 2.3.3), ``c_q sigma sqrt(2 / n)`` for
a log ratio of two arms of n requests each: 3.73 sigma per sqrt(n) at P99, 1.25 at P50. ``sigma`` is the
per-request log-spread: a pilot's measured one (``check --dry-run --pilot``) or the stated defaults of
``Spreads``. The tail rule (``min_tail_samples``) is a floor on top. The same model drives
``verdict.simulate``, whose draws through ``decide`` check these sizes (tests/unit/verdict/
test_operating_characteristics.py): a 40 % per-token win with equal tails at the size given here GOes in
at least 80 % of the draws.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy import stats

from specguard.analysis.ab_statistics import min_samples
from specguard.verdict.budget_tests import GO_SIDE_ALPHA, z_one_sided

__all__ = ["POWER", "Effect", "LevelSize", "Spreads", "level_size", "quantile_sd_factor", "test_power"]

POWER = 0.80  # the and the field's convention for "a GO is likely if the effect is real"
MAX_SIZE = 10_000_000  # requests per arm beyond which a size is reported as unreachable


@functools.lru_cache(maxsize=64)
def quantile_sd_factor(q: float) -> float:
    """``c_q``: the sd of a sample q-quantile's log, per unit log-spread and per sqrt(request), for lognormal values."""
    return math.sqrt(q * (1 - q)) / float(stats.norm.pdf(stats.norm.ppf(q)))


@dataclass(frozen=True)
class Spreads:
    """Per-request log-spread (sd of the log) of each metric.

    The defaults are those of the embedded CPU demo's measured runs, rounded up: per-token latency 0.30,
    E2E 0.35, TTFT 0.25 (``check --dry-run --pilot`` measures a deployment's own).
    """

    objective: float = 0.30
    e2e: float = 0.35
    ttft: float = 0.25


@dataclass(frozen=True)
class Effect:
    """The assumed truth a size is for: the objective's relative gain, and each P99 guardrail's ratio."""

    objective_gain: float  # 0.20: the candidate's objective 20 % better (lower latency, or higher rate)
    e2e_ratio: float = 1.0
    ttft_ratio: float = 1.0


@dataclass(frozen=True)
class LevelSize:
    """What one traffic level needs per arm, summed over its cells, and which test set it."""

    traffic: str
    requests_per_arm: int
    per_cell: int
    limited_by: str  # "objective", "P99 E2E", "P99 TTFT" or "tail rule"
    power: float  # this level's probability of passing at that size


def test_power(log_effect_margin: float, sd: float, alpha: float = GO_SIDE_ALPHA) -> float:
    """P(a one-sided bound at ``alpha`` clears a line ``log_effect_margin`` away from the truth), sd of the estimate."""
    if sd <= 0:
        return 1.0 if log_effect_margin > 0 else 0.0
    return float(stats.norm.cdf(log_effect_margin / sd - z_one_sided(alpha)))


def _objective_power(n_cell: int, effect: Effect, min_improvement: float, sigma: float, q: float, alpha: float) -> float:
    """A target cell's objective: the estimate's gain at least the minimum, and its bound's gain above 0."""
    sd = quantile_sd_factor(q) * sigma * math.sqrt(2 / n_cell)
    truth = math.log(1 - effect.objective_gain)  # the log ratio (as lower-is-better; a rate's is mirrored)
    line = min(math.log(1 - min_improvement), -z_one_sided(alpha) * sd)
    return float(stats.norm.cdf((line - truth) / sd))


def _guard_power(n_level: int, ratio: float, budget: float, sigma: float, alpha: float) -> float:
    sd = quantile_sd_factor(0.99) * sigma * math.sqrt(2 / n_level)
    return test_power(math.log(1 + budget) - math.log(ratio), sd, alpha)


def level_power(
    per_cell: int,
    cells: int,
    target: bool,
    effect: Effect,
    min_improvement: float,
    budgets: tuple[float, float],
    spreads: Spreads,
    objective_q: float,
    alpha: float = GO_SIDE_ALPHA,
) -> dict[str, float]:
    """Each test's power at one level with ``per_cell`` requests per arm in each of its ``cells``."""
    n = per_cell * cells
    out = {
        "P99 E2E": _guard_power(n, effect.e2e_ratio, budgets[0], spreads.e2e, alpha),
        "P99 TTFT": _guard_power(n, effect.ttft_ratio, budgets[1], spreads.ttft, alpha),
    }
    if target:
        one = _objective_power(per_cell, effect, min_improvement, spreads.objective, objective_q, alpha)
        out["objective"] = one**cells
    return out


def level_size(
    traffic: str,
    cells: int,
    target: bool,
    levels: int,
    effect: Effect,
    min_improvement: float,
    budgets: tuple[float, float],
    spreads: Spreads,
    objective_q: float,
    min_tail: int,
    power: float = POWER,
    alpha: float = GO_SIDE_ALPHA,
) -> LevelSize:
    """The fewest requests per arm and cell at which this level passes with ``power ** (1 / levels)``.

    The tail rule is a floor: the level's pooled requests reach ``min_samples(0.99)`` for the P99
    guardrails, a target cell's own reach the objective's.
    """
    goal = power ** (1 / max(levels, 1))
    floor_tail = math.ceil(min_samples(0.99, min_tail) / cells)
    if target:
        floor_tail = max(floor_tail, min_samples(objective_q, min_tail))

    def product(k: int) -> float:
        return math.prod(level_power(k, cells, target, effect, min_improvement, budgets, spreads, objective_q, alpha).values())

    hi = 1
    while product(hi) < goal and hi < MAX_SIZE:
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:  # the product rises with the size: the first size that reaches the goal
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if product(mid) < goal else (lo, mid)
    per_cell = max(hi, floor_tail)
    powers = level_power(per_cell, cells, target, effect, min_improvement, budgets, spreads, objective_q, alpha)
    weakest = min(powers, key=lambda k: powers[k])
    return LevelSize(
        traffic=traffic,
        requests_per_arm=per_cell * cells,
        per_cell=per_cell,
        limited_by="tail rule" if per_cell == floor_tail and hi < floor_tail else weakest,
        power=math.prod(powers.values()),
    )
