"""Comparing two arms: percentile ratios with bootstrap intervals, a rank test, sample-size rules. Pure.

The unit of resampling is the request. A metric with one value per request
(TTFT, TPOT, E2E) is resampled directly; per-token ITL is resampled by
request too (a request's tokens travel together), which respects that tokens
of one request are not independent. Resampling is stratified by repetition:
each bootstrap replicate draws, within every repetition, as many requests as
that repetition has. Replicates are computed as weighted percentiles over the
sorted values (a request's weight is how often it was drawn), with the same
linear interpolation as ``numpy.percentile`` and the run summaries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel
from scipy import stats

from specguard.analysis.defaults import DEFAULT_RESAMPLES, DEFAULT_TARGET_CHANGE, MIN_TAIL_SAMPLES

# One repetition: one list of values per request (a single value for per-request metrics).
Repetition = Sequence[Sequence[float]]


class RatioResult(BaseModel):
    """candidate / baseline for one percentile of one metric, with intervals and the evidence behind them."""

    baseline: float
    candidate: float
    baseline_ci: tuple[float, float] = (math.nan, math.nan)
    candidate_ci: tuple[float, float] = (math.nan, math.nan)
    ratio: float
    ci_low: float
    ci_high: float
    n_baseline: int
    n_candidate: int
    enough_samples: bool
    more_requests_needed: int
    mann_whitney_p: float | None
    prob_candidate_lower: float | None
    repetition_spread_widened: bool


def min_samples(q: float, min_tail: int = MIN_TAIL_SAMPLES) -> int:
    """Observations needed before the q-quantile means anything: ``min_tail`` of them beyond it."""
    return math.ceil(min_tail / (1.0 - q)) if q < 1 else 10**9


def weighted_percentile_rows(sorted_values: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """The q-quantile of each row's multiset: value i repeated weights[row, i] times, linear interpolation.

    Equals ``numpy.percentile(multiset, 100 q)`` for integer weights.
    """
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1]
    h = (total - 1) * q
    k0 = np.floor(h)
    frac = h - k0
    k1 = np.minimum(k0 + 1, total - 1)
    # order statistic k (0-based) is the first value whose cumulative weight exceeds k
    i0 = (cum <= k0[:, None]).sum(axis=1)
    i1 = (cum <= k1[:, None]).sum(axis=1)
    v0 = sorted_values[i0]
    v1 = sorted_values[i1]
    result: np.ndarray = v0 + frac * (v1 - v0)  # indexing gives Any: the annotation states what it is
    return result


def _flatten(reps: Sequence[Repetition]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Values, the request each belongs to, and the request indices of each repetition."""
    values: list[float] = []
    owner: list[int] = []
    strata: list[np.ndarray] = []
    req = 0
    for rep in reps:
        ids = []
        for request_values in rep:
            if len(request_values) == 0:
                continue
            values.extend(request_values)
            owner.extend([req] * len(request_values))
            ids.append(req)
            req += 1
        strata.append(np.asarray(ids, dtype=np.int64))
    return np.asarray(values, dtype=float), np.asarray(owner, dtype=np.int64), strata


def bootstrap_percentile(
    reps: Sequence[Repetition], q: float, resamples: int, rng: np.random.Generator
) -> tuple[float, np.ndarray, int, int]:
    """Point estimate, bootstrap replicates, request count and value count of the q-quantile of pooled repetitions."""
    values, owner, strata = _flatten(reps)
    n_requests = int(sum(len(s) for s in strata))
    if values.size == 0:
        return math.nan, np.full(resamples, math.nan), 0, 0
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    sorted_owner = owner[order]
    # How often each request is drawn, stratum by stratum: multinomial(n, uniform) is n draws with replacement.
    counts = np.zeros((resamples, n_requests), dtype=np.int32)
    for ids in strata:
        if len(ids):
            counts[:, ids] = rng.multinomial(len(ids), np.full(len(ids), 1.0 / len(ids)), size=resamples)
    replicates = np.empty(resamples)
    rows = max(1, 20_000_000 // max(values.size, 1))  # bound memory: rows x values weights at a time
    for start in range(0, resamples, rows):
        weights = counts[start : start + rows][:, sorted_owner]
        replicates[start : start + rows] = weighted_percentile_rows(sorted_values, weights, q)
    return float(np.percentile(values, 100 * q)), replicates, n_requests, int(values.size)


def _per_request_summary(reps: Sequence[Repetition]) -> np.ndarray:
    """One number per request for the rank test: its own value, or the mean of its per-token values."""
    return np.asarray([float(np.mean(r)) for rep in reps for r in rep if len(r) > 0])


# With two repetitions the between-repetition t-interval has one degree of freedom (t = 12.7 at 97.5 %):
# its width says nothing, so widening needs three paired repetitions; below that the interval is the
# request-level bootstrap's alone (analysis/definitions.py says so).
MIN_REPETITIONS_TO_WIDEN = 3


def _repetition_log_ratios(base: Sequence[Repetition], cand: Sequence[Repetition], q: float) -> list[float] | None:
    """log(candidate/baseline) of the q-quantile per repetition, pairing repetitions in run order."""
    pairs = min(len(base), len(cand))
    if pairs < MIN_REPETITIONS_TO_WIDEN:
        return None
    logs = []
    for b, c in zip(base[:pairs], cand[:pairs]):
        bv = [x for r in b for x in r]
        cv = [x for r in c for x in r]
        if not bv or not cv:
            return None
        pb, pc = np.percentile(bv, 100 * q), np.percentile(cv, 100 * q)
        if pb <= 0 or pc <= 0:
            return None
        logs.append(math.log(pc / pb))
    return logs


def repetitions_disagree(logs: Sequence[float], pooled_se_log: float) -> bool:
    """Cochran's Q: do per-repetition log-ratios scatter more than request-level noise explains (p < 0.05)?

    Each repetition holds 1/R of the requests, so its own standard error is
    about the pooled one times sqrt(R).
    """
    r = len(logs)
    if r < 2 or pooled_se_log <= 0:
        return False
    se_single = pooled_se_log * math.sqrt(r)
    q_stat = float(np.sum((np.asarray(logs) - np.mean(logs)) ** 2)) / se_single**2
    return float(stats.chi2.sf(q_stat, r - 1)) < 0.05


def undefined_ratio(pb: float, pc: float, nb: int, nc: int) -> RatioResult:
    """No ratio: an arm without requests, or a baseline value of zero (a percentile, or a goodput)."""
    return RatioResult(
        baseline=pb,
        candidate=pc,
        ratio=math.nan,
        ci_low=math.nan,
        ci_high=math.nan,
        n_baseline=nb,
        n_candidate=nc,
        enough_samples=False,
        more_requests_needed=0,
        mann_whitney_p=None,
        prob_candidate_lower=None,
        repetition_spread_widened=False,
    )


def _interval(replicates: np.ndarray) -> tuple[float, float]:
    return float(np.percentile(replicates, 2.5)), float(np.percentile(replicates, 97.5))


def _ratio_interval(rb: np.ndarray, rc: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The finite replicate ratios and their 95 % percentile interval."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = rc / rb
    ratios = ratios[np.isfinite(ratios)]
    lo, hi = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
    return ratios, lo, hi


def _widen_for_repetitions(
    base: Sequence[Repetition], cand: Sequence[Repetition], q: float, ratios: np.ndarray, lo: float, hi: float
) -> tuple[float, float, bool]:
    """When repetitions disagree beyond request-level noise, hull the interval with a t-interval over them."""
    logs = _repetition_log_ratios(base, cand, q)
    positive = ratios[ratios > 0]
    if logs is None or positive.size <= 1 or not repetitions_disagree(logs, float(np.std(np.log(positive)))):
        return lo, hi, False
    mean = float(np.mean(logs))
    half = float(stats.t.ppf(0.975, len(logs) - 1) * np.std(logs, ddof=1) / math.sqrt(len(logs)))
    return min(lo, math.exp(mean - half)), max(hi, math.exp(mean + half)), True


def _more_requests(n: int, values: int, q: float, min_tail: int, enough: bool, lo: float, hi: float, target_change: float) -> int:
    """More requests per arm: for the tail rule when short of it, else to narrow the interval to ``target_change``."""
    if not enough:
        # Below the tail rule the interval itself is unreliable: what is missing is tail observations.
        per_request = values / n if n else 1.0
        return max(math.ceil((min_samples(q, min_tail) - values) / per_request), 0)
    half_log = (math.log(hi) - math.log(lo)) / 2 if lo > 0 and hi > 0 else math.inf
    # A zero target cannot size anything (any change counts): size for the default change then.
    target_log = math.log(1 + (target_change if target_change > 0 else DEFAULT_TARGET_CHANGE))
    return max(math.ceil(n * (half_log / target_log) ** 2) - n, 0) if math.isfinite(half_log) else 0


def _rank_test(base: Sequence[Repetition], cand: Sequence[Repetition]) -> tuple[float | None, float | None]:
    """(Mann-Whitney p, probability that a candidate request is lower), on one value per request."""
    xb, xc = _per_request_summary(base), _per_request_summary(cand)
    if len(xb) < 2 or len(xc) < 2:
        return None, None
    res = stats.mannwhitneyu(xc, xb, alternative="two-sided")
    # U counts pairs where the candidate is larger; ties count half.
    return float(res.pvalue), 1.0 - float(res.statistic) / (len(xb) * len(xc))


def compare_percentile(
    base: Sequence[Repetition],
    cand: Sequence[Repetition],
    q: float,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    target_change: float = DEFAULT_TARGET_CHANGE,
    min_tail: int = MIN_TAIL_SAMPLES,
) -> RatioResult:
    """candidate/baseline of the q-quantile with a 95 % percentile-bootstrap interval.

    With three or more repetitions per arm, the between-repetition spread is
    checked (``repetitions_disagree``); when the repetitions disagree more
    than request-level noise explains, the interval is widened to also cover
    a t-interval over the per-repetition ratios.
    ``more_requests_needed`` is, below the tail rule, how many more requests
    per arm would bring enough observations beyond the percentile; above it,
    how many more would, at the observed spread, shrink the interval's
    half-width (in log-ratio) to ``target_change``, so that a change of that
    size could be told apart.
    """
    return _compare(base, cand, base, cand, q, resamples, seed, target_change, min_tail)


def compare_pooled_percentile(
    base_cells: Sequence[Sequence[Repetition]],
    cand_cells: Sequence[Sequence[Repetition]],
    q: float,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    target_change: float = DEFAULT_TARGET_CHANGE,
    min_tail: int = MIN_TAIL_SAMPLES,
) -> RatioResult:
    """The q-quantile of several cells' requests taken together (one traffic level), each cell a stratum.

    A cell is a list of repetitions. Every (cell, repetition) is resampled within itself, as many requests
    as it holds, so each cell keeps its weight in every replicate (a stratified bootstrap); the tail rule
    counts the pooled observations. Repetitions are compared for the widening rule across cells: the r-th
    repetitions of every cell, together, against each other.
    """
    base = [rep for cell in base_cells for rep in cell]
    cand = [rep for cell in cand_cells for rep in cell]
    return _compare(
        base, cand, _by_repetition(base_cells), _by_repetition(cand_cells), q, resamples, seed, target_change, min_tail
    )


def _by_repetition(cells: Sequence[Sequence[Repetition]]) -> list[Repetition]:
    """The r-th repetition of every cell, pooled, for r = 1 .. the most repetitions a cell has."""
    depth = max((len(c) for c in cells), default=0)
    return [[req for c in cells if r < len(c) for req in c[r]] for r in range(depth)]


def _compare(
    base: Sequence[Repetition],
    cand: Sequence[Repetition],
    widen_base: Sequence[Repetition],
    widen_cand: Sequence[Repetition],
    q: float,
    resamples: int,
    seed: int,
    target_change: float,
    min_tail: int,
) -> RatioResult:
    """The bootstrap over ``base`` and ``cand`` (each item a stratum); the widening rule over ``widen_*``."""
    rng = np.random.default_rng(seed)
    pb, rb, nb, vb = bootstrap_percentile(base, q, resamples, rng)
    pc, rc, nc, vc = bootstrap_percentile(cand, q, resamples, rng)
    if nb == 0 or nc == 0 or pb <= 0:
        return undefined_ratio(pb, pc, nb, nc)
    # The tail rule counts observations (tokens, for per-token ITL); precision counts requests.
    enough = min(vb, vc) >= min_samples(q, min_tail)
    ratios, lo, hi = _ratio_interval(rb, rc)
    lo, hi, widened = _widen_for_repetitions(widen_base, widen_cand, q, ratios, lo, hi)
    need = _more_requests(min(nb, nc), min(vb, vc), q, min_tail, enough, lo, hi, target_change)
    mw_p, prob_lower = _rank_test(base, cand)
    return RatioResult(
        baseline=pb,
        candidate=pc,
        baseline_ci=_interval(rb),
        candidate_ci=_interval(rc),
        ratio=pc / pb,
        ci_low=lo,
        ci_high=hi,
        n_baseline=nb,
        n_candidate=nc,
        enough_samples=enough,
        more_requests_needed=need,
        mann_whitney_p=mw_p,
        prob_candidate_lower=prob_lower,
        repetition_spread_widened=widened,
    )


def pool_log_ratios(results: Sequence[RatioResult]) -> RatioResult:
    """Several strata's ratios as one: a fixed-effect (inverse-variance) mean of their log ratios, with its 95 % interval.

    Each stratum's standard error is read from its own 95 % interval (its half-width on the log scale over
    1.96). If any stratum lacks the samples its ratio needs, so does the pooled one: dropping it would hide
    exactly the stratum where, say, a candidate met no SLO at all.
    """
    nb = sum(r.n_baseline for r in results)
    nc = sum(r.n_candidate for r in results)
    mean_b = float(np.mean([r.baseline for r in results])) if results else math.nan
    mean_c = float(np.mean([r.candidate for r in results])) if results else math.nan
    usable = all(r.enough_samples and 0 < r.ci_low <= r.ratio <= r.ci_high < math.inf for r in results)
    if not results or not usable:
        pooled = undefined_ratio(mean_b, mean_c, nb, nc)
        return pooled.model_copy(update={"more_requests_needed": max((r.more_requests_needed for r in results), default=0)})
    z = float(stats.norm.ppf(0.975))
    logs = np.array([math.log(r.ratio) for r in results])
    se = np.array([max((math.log(r.ci_high) - math.log(r.ci_low)) / (2 * z), 1e-9) for r in results])
    w = 1 / se**2
    est = float(np.sum(w * logs) / np.sum(w))
    half = z / math.sqrt(float(np.sum(w)))
    return RatioResult(
        baseline=mean_b,
        candidate=mean_c,
        ratio=math.exp(est),
        ci_low=math.exp(est - half),
        ci_high=math.exp(est + half),
        n_baseline=nb,
        n_candidate=nc,
        enough_samples=True,
        more_requests_needed=0,
        mann_whitney_p=None,
        prob_candidate_lower=None,
        repetition_spread_widened=any(r.repetition_spread_widened for r in results),
    )
