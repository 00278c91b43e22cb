"""A risk difference pooled over strata: Mantel-Haenszel weights, Miettinen-Nurminen's stratified score interval. Pure.

Why this method. An error rate is one property of the deployment, measured in
strata (the cells of a check, or the cells of one traffic level): pooling the
counts without strata would let a cell with more requests, or a sampling
setting that fails more on both arms, stand for the whole. The common
difference is estimated with Mantel-Haenszel (CMH) weights
``w_i = n_b n_c / (n_b + n_c)``, and its interval is the stratified score
interval of Miettinen & Nurminen (1985, "Comparative analysis of two rates",
Statistics in Medicine 4:213-226), the method behind SAS PROC FREQ's
``COMMONRISKDIFF(CL=MN)``: every ``delta`` whose score statistic

    Z(delta) = sum w_i (d_i - delta) / sqrt(sum w_i^2 V_i(delta))

lies within +-z, where ``V_i(delta)`` is the variance of stratum i's
difference at the rates that maximise its likelihood under "difference =
delta" (Farrington-Manning's closed form), times MN's ``N/(N-1)``. A score
interval, unlike a Wald interval, has a width when no request failed (0 in
576 against 0 in 576 per arm: -0.66 to +0.66 points) and stays in [-1, 1].
The one-sided p-value of H0 "difference <= budget" is ``1 - Phi(Z(budget))``,
so the test and the interval agree by construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

__all__ = ["Stratum", "restricted_rates", "stratified_difference", "stratified_p_beyond", "stratified_score"]

# (errors, requests) of the baseline, then of the candidate, in one stratum.
Stratum = tuple[tuple[int, int], tuple[int, int]]

_EDGE = 1e-9  # the interval is searched within (-1, 1): a difference of exactly +-1 has no likelihood to spare


def _arrays(strata: Sequence[Stratum]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    kept = [s for s in strata if s[0][1] > 0 and s[1][1] > 0]  # a stratum an arm did not reach says nothing
    xb = np.array([s[0][0] for s in kept], dtype=float)
    nb = np.array([s[0][1] for s in kept], dtype=float)
    xc = np.array([s[1][0] for s in kept], dtype=float)
    nc = np.array([s[1][1] for s in kept], dtype=float)
    return xb, nb, xc, nc


def restricted_rates(
    xb: np.ndarray, nb: np.ndarray, xc: np.ndarray, nc: np.ndarray, delta: float
) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, candidate) rates maximising each stratum's likelihood subject to candidate - baseline = delta.

    The log-likelihood is concave in the baseline rate on the interval where both rates are in [0, 1], so
    its maximum is where the derivative crosses zero, or an end of the interval: found by bisection, all
    strata at once (60 halvings put it within 1e-18 of the root; Farrington & Manning's cubic gives the same
    root in closed form, but loses digits when a stratum has no failure).
    """
    lo = np.full(xb.shape, max(0.0, -delta))
    hi = np.full(xb.shape, min(1.0, 1.0 - delta))

    def slope(pb: np.ndarray) -> np.ndarray:
        pc = pb + delta
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = (
                np.where(xb > 0, xb / pb, 0.0)
                - np.where(nb - xb > 0, (nb - xb) / (1 - pb), 0.0)
                + np.where(xc > 0, xc / pc, 0.0)
                - np.where(nc - xc > 0, (nc - xc) / (1 - pc), 0.0)
            )
        cleaned: np.ndarray = np.nan_to_num(terms, nan=0.0, posinf=1e300, neginf=-1e300)
        return cleaned

    for _ in range(60):
        mid = (lo + hi) / 2
        rising = slope(mid) > 0
        lo = np.where(rising, mid, lo)
        hi = np.where(rising, hi, mid)
    base = (lo + hi) / 2
    return base, np.clip(base + delta, 0.0, 1.0)


def _weights(nb: np.ndarray, nc: np.ndarray) -> np.ndarray:
    w: np.ndarray = nb * nc / (nb + nc)
    normalised: np.ndarray = w / w.sum()
    return normalised


def stratified_score(strata: Sequence[Stratum], delta: float) -> float:
    """Z(delta) of the module docstring: positive when the pooled difference lies above ``delta``."""
    xb, nb, xc, nc = _arrays(strata)
    if xb.size == 0:
        return 0.0
    w = _weights(nb, nc)
    d = xc / nc - xb / nb
    pb, pc = restricted_rates(xb, nb, xc, nc, delta)
    n = nb + nc
    var = (pb * (1 - pb) / nb + pc * (1 - pc) / nc) * n / np.maximum(n - 1, 1)
    num = float(np.sum(w * (d - delta)))
    den = math.sqrt(float(np.sum(w**2 * var)))
    if den == 0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / den


def stratified_difference(strata: Sequence[Stratum], z: float = float(stats.norm.ppf(0.975))) -> tuple[float, float, float]:
    """(pooled difference, low, high): candidate rate - baseline rate, MH-weighted, with the MN score interval at ``z``."""
    xb, nb, xc, nc = _arrays(strata)
    if xb.size == 0:
        return math.nan, -1.0, 1.0
    w = _weights(nb, nc)
    est = float(np.sum(w * (xc / nc - xb / nb)))
    # Z falls as delta rises: the bounds are where it crosses +z (low) and -z (high).
    lo_edge, hi_edge = -1 + _EDGE, 1 - _EDGE
    low = (
        lo_edge
        if stratified_score(strata, lo_edge) <= z
        else optimize.brentq(lambda t: stratified_score(strata, t) - z, lo_edge, est, xtol=1e-10)
    )
    high = (
        hi_edge
        if stratified_score(strata, hi_edge) >= -z
        else optimize.brentq(lambda t: stratified_score(strata, t) + z, est, hi_edge, xtol=1e-10)
    )
    return est, float(low), float(high)


def stratified_p_beyond(strata: Sequence[Stratum], budget: float) -> float:
    """One-sided p-value of H0 "pooled candidate - baseline <= budget": small when the rise is beyond the budget."""
    if not _arrays(strata)[0].size:
        return 1.0
    return float(stats.norm.sf(stratified_score(strata, budget)))
