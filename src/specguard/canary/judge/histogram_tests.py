"""The two Kayenta-style tests on the pools' server-side histograms, and the window deltas they read. Pure.

Behind HAProxy or a Gateway specguard has no request of its own to measure; each pool's vLLM servers
expose cumulative histograms (``server_metrics.histograms``), read at the window's step times. From those:

* per-step points: each step's delta (between consecutive reads, the pool's servers summed) gives one point,
  its percentile as PromQL's ``histogram_quantile`` reads it. Steps are Kayenta's unit of observation:
  consecutive steps share far less than consecutive tokens of one request do, so a rank test on points
  does not take thousands of dependent observations for independent ones.
* the window's distribution: the window's delta per pool (the sum of its steps), compared directly, as the
  percentile ratio (with a bootstrap interval over the bucket counts) and a rank test on the buckets.

``histogram_judge`` combines them into a verdict; this module only computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specguard.analysis.ab_statistics import RatioResult, min_samples
from specguard.canary.judge.window import rank_test_worse
from specguard.server_metrics.histograms import Histogram, histogram_delta, histogram_quantile, merge_histograms

__all__ = [
    "PoolDeltas",
    "bucket_counts",
    "bucket_rank_test",
    "can_reject",
    "censored",
    "pool_deltas",
    "quantile_ratio",
    "step_point_test",
    "step_points",
]


@dataclass(frozen=True)
class PoolDeltas:
    """One pool's window: per-step deltas and the whole window's, servers summed; or why there are none."""

    steps: tuple[Histogram, ...] = ()
    window: Histogram | None = None
    problem: str | None = None  # a restart (counts fell), changed or differing buckets, too few reads
    restart: bool = False


def pool_deltas(servers: Sequence[Sequence[Histogram]]) -> PoolDeltas:
    """Deltas of a pool from each server's cumulative reads at the same step times (oldest first).

    A server whose counts fall between two reads restarted: its window says nothing about the pool's
    steady state (cold caches, recompilation), and its lost counts cannot be recovered, so the whole pool
    is reported instead of judged. Servers are kept apart until their deltas are taken, so that one
    restarted server cannot hide inside the pool's sum.
    """
    if not servers:
        return PoolDeltas(problem="no server read")
    lengths = {len(reads) for reads in servers}
    if len(lengths) != 1 or min(lengths) < 2:
        return PoolDeltas(problem=f"servers need the same step times and two reads or more (got {sorted(lengths)} reads)")
    per_server: list[list[Histogram]] = []
    for k, reads in enumerate(servers):
        deltas: list[Histogram] = []
        for i in range(len(reads) - 1):
            d = histogram_delta(reads[i], reads[i + 1])
            if d is None:
                if reads[i].bounds != reads[i + 1].bounds:
                    return PoolDeltas(problem=f"server {k}: buckets changed between reads {i} and {i + 1}")
                return PoolDeltas(problem=f"server {k}: counts fell between reads {i} and {i + 1} (a restart)", restart=True)
            deltas.append(d)
        per_server.append(deltas)
    steps = [merge_histograms([s[i] for s in per_server]) for i in range(len(per_server[0]))]
    if any(s is None for s in steps):
        return PoolDeltas(problem="the pool's servers have different buckets")
    kept = tuple(s for s in steps if s is not None)
    # The window is the sum of its steps (equal to last read minus first for each server, summed).
    return PoolDeltas(steps=kept, window=merge_histograms(list(kept)))


def bucket_counts(h: Histogram) -> np.ndarray:
    """Observations per bucket (not cumulative), as integers: exposition counts are whole numbers."""
    return np.rint(np.diff(np.asarray(h.cumulative, dtype=float), prepend=0.0)).clip(min=0).astype(np.int64)


def binned_shift_superiority(h: Histogram, factor: float, sign: float) -> float | None:
    """p' for the bucket rank test: P(a value of h times ``factor`` falls in a worse bucket than an independent value
    of h), ties (the same bucket) half, with each bucket's mass spread evenly over its interval before the shift
    (the first bucket starts at 0; the +Inf bucket keeps its mass). What ``rank_power`` needs for the power of
    ``bucket_rank_test`` to see a regression of ``factor``. None with no observation."""
    w = bucket_counts(h).astype(float)
    if w.sum() <= 0:
        return None
    w /= w.sum()
    upper = np.asarray(h.bounds, dtype=float)
    lower = np.concatenate([[0.0], upper[:-1]])
    shifted = np.zeros_like(w)
    for i in np.nonzero(w)[0]:
        if not math.isfinite(upper[i]):
            shifted[i] += w[i]
            continue
        lo, hi = factor * lower[i], factor * upper[i]
        overlap = np.clip(np.minimum(hi, upper) - np.maximum(lo, lower), 0.0, None)
        if hi > lo:
            shifted += w[i] * overlap / (hi - lo)
        else:
            shifted[i] += w[i]
    below = np.cumsum(w) - w  # P(Y in a lower bucket)
    above = 1.0 - np.cumsum(w)  # P(Y in a higher bucket)
    beaten = below if sign > 0 else above
    return float(np.sum(shifted * (beaten + 0.5 * w)))


def censored(h: Histogram, q: float) -> bool:
    """Whether the q-quantile falls in the +Inf bucket: histogram_quantile then gives the highest finite bound."""
    return len(h.cumulative) >= 2 and h.cumulative[-2] < q * h.cumulative[-1]


def step_points(steps: Sequence[Histogram], q: float, min_count: int) -> list[float]:
    """The q-quantile (seconds) of each step that holds at least ``min_count`` observations."""
    points = [histogram_quantile(s, q) for s in steps if s.count >= min_count and s.cumulative and s.cumulative[-1] > 0]
    return [p for p in points if p is not None]


def can_reject(m: int, n: int, threshold: float) -> bool:
    """Whether a one-sided rank test of m against n points can reach ``threshold`` at all.

    Its smallest p-value, at complete separation, is 1 / C(m + n, m); with fewer points than that allows
    the test cannot reject whatever the data, and a verdict resting on it would say nothing.
    """
    return m >= 2 and n >= 2 and threshold > 0 and 1.0 / math.comb(m + n, m) < threshold


def step_point_test(base: Sequence[float], cand: Sequence[float], budget: float, sign: float) -> float | None:
    """One-sided Mann-Whitney p for "the candidate's points are worse than the baseline's, budget allowed".

    The baseline's points are scaled by (1 + budget) when larger is worse (sign > 0), by (1 - budget) when
    smaller is worse, so the test rejects only for a worsening beyond the budget.
    """
    scale = 1.0 + budget if sign > 0 else 1.0 - budget
    return rank_test_worse([b * scale for b in base], list(cand), sign)


def bucket_rank_test(base: Histogram, cand: Histogram, sign: float) -> float | None:
    """One-sided Mann-Whitney p for "the candidate's mass sits in worse buckets", on the observations as bucket indices.

    Why Mann-Whitney and not chi-square: chi-square on the buckets is two-sided in shape (a candidate whose
    mass moved to lower, faster buckets "differs" as much as a slower one) and needs buckets merged to
    expected counts >= 5; the rank test asks the one-sided question the verdict needs, and scipy's
    tie-corrected normal approximation treats each bucket as one tie group, which is exactly what binning
    does. Both assume independent observations; ``histogram_judge`` pairs it with the per-step test.
    None when the arms cannot be ranked (fewer than two observations, or all in one bucket).
    """
    if base.bounds != cand.bounds:
        return None
    cb, cc = bucket_counts(base), bucket_counts(cand)
    if cb.sum() < 2 or cc.sum() < 2 or np.count_nonzero(cb + cc) < 2:
        return None
    idx = np.arange(len(cb), dtype=float)
    p = rank_test_worse(np.repeat(idx, cb).tolist(), np.repeat(idx, cc).tolist(), sign)
    return p if p is not None and math.isfinite(p) else None


def _replicate_quantiles(h: Histogram, q: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The q-quantile of ``resamples`` histograms with h's total, counts drawn multinomially from h's shares."""
    counts = bucket_counts(h)
    total = int(counts.sum())
    draws = np.cumsum(rng.multinomial(total, counts / total, size=resamples), axis=1)
    out = np.empty(resamples)
    for i, row in enumerate(draws):
        # model_construct: these are h's own validated bounds; validating 2000 copies would dominate the window.
        replicate = Histogram.model_construct(bounds=h.bounds, cumulative=row.tolist(), sum=0.0, count=float(total))
        value = histogram_quantile(replicate, q)
        out[i] = math.nan if value is None else value
    return out


def _interval(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return math.nan, math.nan
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return float(lo), float(hi)


def quantile_ratio(
    base: Histogram, cand: Histogram, q: float, *, resamples: int, rng: np.random.Generator, min_tail: int, scale: float = 1000.0
) -> RatioResult | None:
    """candidate / baseline of the windows' q-quantiles (``histogram_quantile``), values times ``scale`` (ms).

    The 95 % interval is a parametric bootstrap: each pool's bucket counts are redrawn multinomially from its
    own bucket shares (as many observations as it has) and the quantile recomputed. It carries the counting
    noise of the window, not the bucket resolution: inside a bucket the quantile is PromQL's linear guess.
    None when either pool holds no observation or the baseline's quantile is 0.
    """
    qb, qc = histogram_quantile(base, q), histogram_quantile(cand, q)
    if qb is None or qc is None or qb <= 0:
        return None
    rb = _replicate_quantiles(base, q, resamples, rng)
    rc = _replicate_quantiles(cand, q, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo, hi = _interval(rc / rb)
    nb, nc = int(bucket_counts(base).sum()), int(bucket_counts(cand).sum())
    need = min_samples(q, min_tail)
    (blo, bhi), (clo, chi) = _interval(rb), _interval(rc)
    return RatioResult(
        baseline=qb * scale,
        candidate=qc * scale,
        baseline_ci=(blo * scale, bhi * scale),
        candidate_ci=(clo * scale, chi * scale),
        ratio=qc / qb,
        ci_low=lo,
        ci_high=hi,
        n_baseline=nb,
        n_candidate=nc,
        enough_samples=min(nb, nc) >= need,
        # Observations, not requests: a histogram knows no request. Only the tail rule's shortfall is sized.
        more_requests_needed=max(need - min(nb, nc), 0),
        mann_whitney_p=None,
        prob_candidate_lower=None,
        repetition_spread_widened=False,
    )
