"""Synthetic checks from known distributions, decided by the verdict code alone: the rule's operating characteristics. Pure.

Why statistics, not requests. Drawing every request and bootstrapping it costs
about a second per synthetic check on this 2-core machine (30 bootstraps of
100-600 requests at 200 resamples), so thousands of checks would take hours.
Here each statistic the verdict reads is drawn from its large-sample sampling
distribution, and ``decide`` (with ``level_guards``, ``cell_guards``, the
stratified error test, Holm and the alpha spending) runs unchanged on them:

- A latency metric is lognormal per request, with a stated log-spread
  ``sigma``. The log of a sample q-quantile of n such requests is normal
  around the true one with sd ``c_q sigma / sqrt(n)``, ``c_q = sqrt(q(1-q)) /
  phi(z_q)`` (the Bahadur representation; Serfling 1980, "Approximation
  Theorems of Mathematical Statistics", 2.3.3): 1.25 at P50, 3.73 at P99. A
  ratio's interval is the drawn log ratio +- 1.96 times its sd, as the
  percentile bootstrap gives for a large sample.
- By the same representation the quantile's error is a mean of independent
  per-request terms, so successive looks of a sequential check carry
  cumulative sums: look k's statistics are correlated with look k-1's as in a
  real check. A traffic level's pooled quantile shares its cells' sums.
- Errors are binomial counts per cell and arm, tested by the real stratified
  Miettinen-Nurminen code.

What this does not show: the bootstrap's own small-sample calibration, or a
dependence between a request's TTFT, E2E and per-token latency (drawn apart).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from specguard.analysis.ab_statistics import RatioResult, min_samples
from specguard.analysis.compare import QUANTILES
from specguard.verdict.decide import decide
from specguard.verdict.level_guards import LEVEL_PERCENTILES
from specguard.verdict.model import (
    SINGLE_LOOK,
    CellComparison,
    GuardrailRule,
    GuardrailScope,
    LevelComparison,
    Look,
    ObjectiveRule,
    Verdict,
)
from specguard.verdict.power import Spreads, quantile_sd_factor
from specguard.verdict.sequential import look_schedule

__all__ = [
    "Layout",
    "SimGuardrails",
    "SimObjective",
    "Spreads",
    "Truth",
    "quantile_sd_factor",
    "run_sequential",
    "synthetic_verdicts",
]

Z = float(stats.norm.ppf(0.975))
DEFAULT_SPREADS = Spreads()


@dataclass(frozen=True)
class Truth:
    """The planted candidate/baseline ratios and error rates, the same in every cell."""

    name: str
    objective_ratio: float = 1.0
    e2e_ratio: float = 1.0
    ttft_ratio: float = 1.0
    error_baseline: float = 0.0
    error_candidate: float = 0.0
    error_levels: tuple[str, ...] | None = None  # the candidate's errors only at these levels (None: everywhere)


@dataclass(frozen=True)
class SimObjective:
    """An objective as the plan states one (``check.plan.Objective`` fits the same protocol)."""

    metric: str = "itl_ms"
    percentile: str = "p95"
    min_improvement: float = 0.10


@dataclass(frozen=True)
class SimGuardrails:
    """Guardrails at the plan's defaults (``check.plan.Guardrails`` fits the same protocol)."""

    max_p99_e2e_regression: float = 0.05
    max_p99_ttft_regression: float = 0.05
    max_error_rate_increase: float = 0.01
    max_preemption_increase: float = 0.0
    max_goodput_drop: float | None = None
    scope: GuardrailScope = "level"


@dataclass(frozen=True)
class Layout:
    """A check's shape: traffic levels (the targets among them), sampling settings, segments, the objective's quantile."""

    levels: tuple[str, ...] = ("idle", "steady", "burst")
    targets: tuple[str, ...] = ("steady",)
    samplings: tuple[str, ...] = ("greedy", "production")
    segments: tuple[str, ...] = ("extraction", "chat")
    objective: ObjectiveRule = field(default_factory=SimObjective)
    guardrails: GuardrailRule = field(default_factory=SimGuardrails)
    min_tail: int = 5

    @property
    def cells(self) -> list[tuple[str, str, str]]:
        return [(lv, sm, sg) for lv in self.levels for sm in self.samplings for sg in self.segments]


def _ratio(log_ratio: float, sd: float, n: int, q: float, min_tail: int) -> RatioResult:
    enough = n >= min_samples(q, min_tail)
    return RatioResult(
        baseline=1.0,
        candidate=math.exp(log_ratio),
        ratio=math.exp(log_ratio),
        ci_low=math.exp(log_ratio - Z * sd),
        ci_high=math.exp(log_ratio + Z * sd),
        n_baseline=n,
        n_candidate=n,
        enough_samples=enough,
        more_requests_needed=0 if enough else min_samples(q, min_tail) - n,
        mann_whitney_p=None,
        prob_candidate_lower=None,
        repetition_spread_widened=False,
    )


class _Draws:
    """The running sums behind one synthetic check: per cell, metric, quantile and arm; error counts per cell and arm."""

    def __init__(self, layout: Layout, truth: Truth, spreads: Spreads, rng: np.random.Generator) -> None:
        self.layout, self.truth, self.spreads, self.rng = layout, truth, spreads, rng
        k = len(layout.cells)
        self.n = np.zeros(k, dtype=np.int64)
        self.sums = {key: np.zeros((k, 2)) for key in self._keys()}
        self.errors = np.zeros((k, 2), dtype=np.int64)

    def _keys(self) -> list[str]:
        return ["objective"] + [f"{m}:{q}" for m in ("e2e", "ttft") for q in LEVEL_PERCENTILES]

    def add(self, more: np.ndarray) -> None:
        """``more[i]`` further requests per arm in cell i."""
        for key in self.sums:
            self.sums[key] += self.rng.normal(0.0, 1.0, size=self.sums[key].shape) * np.sqrt(more)[:, None]
        for i, (level, _, _) in enumerate(self.layout.cells):
            cand = self.truth.error_candidate
            if self.truth.error_levels is not None and level not in self.truth.error_levels:
                cand = self.truth.error_baseline
            self.errors[i, 0] += self.rng.binomial(more[i], self.truth.error_baseline)
            self.errors[i, 1] += self.rng.binomial(more[i], cand)
        self.n += more

    def _log_ratio(self, key: str, rows: Sequence[int], true_ratio: float, sigma: float, q: float) -> tuple[float, float, int]:
        n = int(self.n[list(rows)].sum())
        c = quantile_sd_factor(q) * sigma
        dev = self.sums[key][list(rows)].sum(axis=0) * c / max(n, 1)
        return math.log(true_ratio) + float(dev[1] - dev[0]), c * math.sqrt(2 / max(n, 1)), n

    def comparisons(self) -> tuple[list[CellComparison], list[LevelComparison]]:
        lay, t, s = self.layout, self.truth, self.spreads
        q_obj = QUANTILES[lay.objective.percentile]
        cells = []
        for i, (level, sampling, segment) in enumerate(lay.cells):
            n = int(self.n[i])
            if n == 0:
                continue
            ratios = {}
            for name, key, ratio, sigma, q in (
                ("objective", "objective", t.objective_ratio, s.objective, q_obj),
                ("e2e", "e2e:p99", t.e2e_ratio, s.e2e, 0.99),
                ("ttft", "ttft:p99", t.ttft_ratio, s.ttft, 0.99),
            ):
                lr, sd, _ = self._log_ratio(key, [i], ratio, sigma, q)
                ratios[name] = _ratio(lr, sd, n, q, lay.min_tail)
            eb, ec = (int(x) for x in self.errors[i])
            cells.append(
                CellComparison(
                    traffic=level,
                    offered_load=float(lay.levels.index(level) + 1),
                    target=level in lay.targets,
                    sampling=sampling,
                    segment=segment,
                    objective=ratios["objective"],
                    p99_e2e=ratios["e2e"],
                    p99_ttft=ratios["ttft"],
                    error_rate_baseline=eb / n,
                    error_rate_candidate=ec / n,
                    errors_baseline=eb,
                    errors_candidate=ec,
                    requests_baseline=n,
                    requests_candidate=n,
                )
            )
        levels = []
        for j, level in enumerate(lay.levels):
            rows = [i for i, c in enumerate(lay.cells) if c[0] == level and self.n[i] > 0]
            if not rows:
                continue
            tables: dict[str, dict[str, RatioResult]] = {"e2e": {}, "ttft": {}}
            for metric, ratio, sigma in (("e2e", t.e2e_ratio, s.e2e), ("ttft", t.ttft_ratio, s.ttft)):
                for name, q in LEVEL_PERCENTILES.items():
                    lr, sd, n = self._log_ratio(f"{metric}:{name}", rows, ratio, sigma, q)
                    tables[metric][name] = _ratio(lr, sd, n, q, lay.min_tail)
            levels.append(
                LevelComparison(
                    traffic=level,
                    offered_load=float(j + 1),
                    target=level in lay.targets,
                    cells=[f"{level} / {sm} / {sg}" for (lv, sm, sg) in lay.cells if lv == level],
                    e2e=tables["e2e"],
                    ttft=tables["ttft"],
                )
            )
        return cells, levels

    def decide(self, look: Look = SINGLE_LOOK) -> Verdict:
        cells, levels = self.comparisons()
        return decide(cells, self.layout.objective, self.layout.guardrails, levels=levels, look=look)


def synthetic_verdicts(
    layout: Layout, truth: Truth, per_cell: int, draws: int, seed: int = 0, spreads: Spreads = DEFAULT_SPREADS
) -> list[Verdict]:
    """``draws`` fixed-size checks of ``per_cell`` requests per arm in every cell, each decided at one look."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        d = _Draws(layout, truth, spreads, rng)
        d.add(np.full(len(layout.cells), per_cell))
        out.append(d.decide())
    return out


@dataclass(frozen=True)
class SequentialOutcome:
    verdict: str
    looks: int
    requests_per_arm: int


def run_sequential(
    layout: Layout, truth: Truth, per_cell: int, max_per_arm: int, rng: np.random.Generator, spreads: Spreads = DEFAULT_SPREADS
) -> SequentialOutcome:
    """One ``check --until-decided``: ``per_cell`` requests per arm per cell a repetition, further repetitions of the
    undecided (level, sampling) blocks only, looks on the planned schedule, until decided or the budget is spent."""
    k = len(layout.cells)
    per_rep = per_cell * k
    sizes = [per_rep]
    while sizes[-1] + per_rep <= max_per_arm:
        sizes.append(sizes[-1] + per_rep)
    schedule = look_schedule(sizes)
    d = _Draws(layout, truth, spreads, rng)
    d.add(np.full(k, per_cell))
    for look in schedule:
        v = d.decide(look)
        if v.verdict != "INCONCLUSIVE" or look.final or not v.undecided:
            return SequentialOutcome(v.verdict, look.index, int(d.n.sum()))
        more = np.zeros(k, dtype=np.int64)
        for i, (level, sampling, _) in enumerate(layout.cells):
            if any(u.traffic == level and u.sampling in (None, sampling) for u in v.undecided):
                more[i] = per_cell
        if int((d.n + more).sum()) > max_per_arm:
            return SequentialOutcome(v.verdict, look.index, int(d.n.sum()))
        d.add(more)
    return SequentialOutcome("INCONCLUSIVE", len(schedule), int(d.n.sum()))
