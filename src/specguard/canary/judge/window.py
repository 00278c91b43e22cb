"""The canary's per-window analysis: candidate against baseline, per segment and metric, with error control. Pure.

Per window and segment every metric gets two numbers that answer different questions:

* a one-sided rank test (Mann-Whitney U, on one value per request: its own value, or the mean of its
  per-token values, as ``analysis.ab_statistics`` does), asking "is the candidate worse at all?";
* the percentile ratio candidate / baseline with a percentile-bootstrap interval, from
  ``analysis.ab_statistics.compare_percentile``, asking "by how much?".

A metric FAILs only when both say so (Kayenta's effect-size gate): the test is significant at this look's
threshold AND the ratio's point estimate is beyond the metric's budget. A significant but small change is
no reason to roll back; a large but noisy one is no evidence. Fewer than ``min_samples`` requests in either
arm make the metric INCONCLUSIVE: a window without evidence holds, it never promotes and never rolls back.
A metric PASSes only when its rank test had at least ``min_power`` (0.8) power to see a regression of its
budget (``rank_power``: Noether's formula on the window's own baseline), otherwise it is INCONCLUSIVE and says
how many times the window's requests would reach that power; a percentile with fewer than ``min_tail``
observations beyond it is judged at P90, then P50, and says so (``PERCENTILE_FALLBACK``).

Matched comparison. At 5 % of traffic the candidate pool carries far less load than the baseline pool, and
latency (and speculation's effect) depends on load, so comparing the pools as they come flatters the
candidate. Three comparisons, chosen in this order and named in every result:

* ``control``: a control pool (a baseline replica receiving the candidate's share, Kayenta's new-baseline
  pattern) is given, so candidate and control carry the same load: compared directly.
* ``stratified``: otherwise, within strata of the per-replica in-flight count at send time (each sample
  carries it). Strata are the power-of-two bins {0}, {1}, {2-3}, {4-7}, ... of that count; a stratum is used
  when each arm has at least ``min_stratum_samples`` requests in it; when none is, coarser bands of 2 and 4
  adjacent bins are tried in turn (``COARSENING``) before the metric is INCONCLUSIVE. The rank test is van Elteren's
  stratified Wilcoxon (per-stratum U statistics, weighted 1/(n_b + n_c + 1), summed, normal approximation).
  The ratio compares the candidate's common-strata requests with a baseline subsample drawn (seeded) to
  the candidate's stratum mix: "the baseline at the candidate's load". Overlap rule: a warning when the
  common strata hold less than ``min_overlap`` (default 50 %) of either arm's requests; with no common
  stratum at all the metric is INCONCLUSIVE.
* ``naive``: pools compared as they come; only when asked for (``matching="naive"``), to show the bias.

Sequential error control (the method a report quotes, ``ERROR_CONTROL``). Each window is one look; the
rollout plans at most ``max_looks`` of them. The overall false-FAIL probability ``alpha`` is spent over the
looks by a Lan-DeMets spending function A(t), t = look / max_looks: Pocock-type A(t) = alpha ln(1 + (e-1) t)
(the default: nearly even spending, so that a regression early in the rollout is caught early) or
O'Brien-Fleming-type A(t) = 2 (1 - Phi(z_{1-alpha/2} / sqrt(t))) (spends almost nothing on early looks).
Look k gets alpha_k = A(t_k) - A(t_{k-1}), split evenly (Bonferroni) over the tests of that look (metrics x
segments). By the union bound, whatever the dependence between looks, the probability that any window of
the rollout FAILs at all when the pools do not differ is at most sum alpha_k = A(1) = alpha; a rollback
needs one or more failing windows, so the probability of a false rollback is at most alpha too. Looks past
``max_looks`` extend the plan (``look_alpha``: look K+j gets alpha_K / (j (j+1)), never 0) and say so in the
window's warnings. Only windows that ran a test spend a look (``spends_look``): a window without evidence
leaves its look to the next one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, model_validator
from scipy import stats

from specguard.analysis.ab_statistics import RatioResult, compare_percentile
from specguard.analysis.ab_statistics import min_samples as observations_needed
from specguard.analysis.defaults import MIN_RESAMPLES, MIN_TAIL_SAMPLES
from specguard.analysis.definitions import METRIC_DEFINITIONS
from specguard.canary.judge.rank_power import rank_test_power, scale_for_power, shifted_superiority
from specguard.models_base import FiniteModel, StrictModel

WindowVerdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
Comparison = Literal["control", "stratified", "naive"]
Matching = Literal["auto", "naive"]
Spending = Literal["pocock", "obrien_fleming"]
# Where a window's evidence came from: the proxy's per-request samples (this module), or the pools' own
# server-side histograms and counters (``histogram_judge``, for pools behind HAProxy or a Gateway).
Source = Literal["proxy_requests", "server_histograms"]

ERROR_CONTROL = (
    "False rollbacks are bounded over the whole rollout, not per window: the overall alpha is spent over the "
    "planned looks (one per window) by a Lan-DeMets {spending}-type spending function; each look's share is "
    "split evenly over its tests (metrics x segments), so by the union bound P(any false FAIL in the rollout) "
    "<= alpha = {alpha:g} over {max_looks} looks."
)


class MetricRule(FiniteModel):
    """One latency metric of the analysis: which percentile, which way is worse, how much worse is allowed."""

    metric: str  # a key of METRIC_DEFINITIONS with per-request samples: itl_ms, ttft_ms, e2e_ms, tpot_ms
    percentile: float = Field(default=0.99, gt=0, lt=1)
    direction: Literal["lower_is_better", "higher_is_better"] = "lower_is_better"
    budget: float = Field(default=0.10, ge=0)  # allowed relative worsening of the percentile: 0.10 = 10 %

    @model_validator(mode="after")
    def _known(self) -> MetricRule:
        if self.metric not in METRIC_DEFINITIONS:
            raise ValueError(f"unknown metric {self.metric!r}; known: {', '.join(sorted(METRIC_DEFINITIONS))}")
        return self

    @property
    def name(self) -> str:
        return f"p{self.percentile * 100:g}_{self.metric}"


def _default_metrics() -> list[MetricRule]:
    return [MetricRule(metric="itl_ms"), MetricRule(metric="e2e_ms"), MetricRule(metric="ttft_ms")]


class AnalysisPolicy(FiniteModel):
    """What the window analysis needs of the rollout file's ``analysis`` section (the lead wires the two)."""

    metrics: list[MetricRule] = Field(default_factory=_default_metrics)
    max_error_rate_increase: float | None = Field(default=0.005, ge=0)  # absolute points: 0.005 = 0.5 points; None: off
    min_samples: int = Field(default=50, ge=2)  # requests per arm, per segment and window
    min_stratum_samples: int = Field(default=5, ge=1)
    min_overlap: float = Field(default=0.5, ge=0, le=1)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    max_looks: int = Field(default=60, ge=1)
    spending: Spending = "pocock"
    resamples: int = Field(default=MIN_RESAMPLES * 5, ge=MIN_RESAMPLES)
    min_tail: int = Field(default=MIN_TAIL_SAMPLES, ge=1)
    # A PASS needs this power to see a regression of the budget's size (rank_power); 0: Kayenta's plain rule.
    min_power: float = Field(default=0.8, ge=0, lt=1)


class RequestSample(StrictModel):
    """One finished request of one pool: its in-flight count at send time and its metric values.

    ``in_flight`` is the number of requests in flight on the replica it was sent to, not counting itself.
    ``values`` maps a metric to its values: one for per-request metrics, one per token for ``itl_ms``.
    """

    in_flight: int = Field(ge=0)
    ok: bool = True
    values: dict[str, list[float]] = {}


class SegmentSamples(StrictModel):
    """One segment's requests of one window, per pool; ``control`` only when a control pool exists."""

    baseline: list[RequestSample]
    candidate: list[RequestSample]
    control: list[RequestSample] | None = None


class MetricResult(BaseModel):
    segment: str
    metric: str
    verdict: WindowVerdict
    comparison: Comparison
    ratio: RatioResult | None = None  # None for the error rate and when no ratio could be formed
    p_value: float | None = None  # one-sided, "the candidate is worse"
    threshold: float  # the p-value below which this test rejects at this look
    budget: float
    n_baseline: int
    n_candidate: int
    baseline_value: float | None = None
    candidate_value: float | None = None
    text: str
    test: str | None = None  # which test decided, where the source offers a choice (histogram_judge); None: this module's
    percentile: float | None = None  # the percentile the ratio was judged at, when the rule's was not resolvable
    power: float | None = None  # the test's power to see the budget (rank_power); None where no test ran
    scale_needed: float | None = None  # an undecided result: how many times this window's requests would decide it


class WindowAnalysis(BaseModel):
    look: int
    verdict: WindowVerdict
    comparison: Comparison
    alpha_look: float
    results: list[MetricResult]
    warnings: list[str]
    error_control: str
    source: Source = "proxy_requests"
    method: str | None = None  # the tests used, in words, where not this module's (histogram_judge)
    hold_estimate: str = ""  # an undecided window: how long a window on this traffic would need (hold_estimate())


# ---- sequential error control -------------------------------------------------------------------------------


def spent_alpha(t: float, alpha: float, spending: Spending) -> float:
    """A(t): the share of alpha spent by information fraction t in [0, 1] (Lan-DeMets spending functions)."""
    t = min(max(t, 0.0), 1.0)
    if t == 0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    # sf, not 1 - cdf: early looks spend ~1e-19, which 1 - cdf rounds to 0.
    return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / math.sqrt(t)))


def look_alpha(look: int, alpha: float, max_looks: int, spending: Spending) -> float:
    """alpha_k = A(k/K) - A((k-1)/K) for look k (1-based) of the planned K looks.

    Past the plan the looks are extended, never judged at 0: look K + j gets alpha_K / (j (j + 1)), the last
    planned look's share spread over an open-ended tail that sums to alpha_K (a telescoping series), so the
    whole rollout's false-FAIL bound becomes alpha + alpha_K (Pocock, alpha 0.05, K 60: 0.05 + 0.00053).
    """
    if look < 1:
        raise ValueError(f"looks count from 1, not {look}")
    last = spent_alpha(1.0, alpha, spending) - spent_alpha((max_looks - 1) / max_looks, alpha, spending)
    if look > max_looks:
        j = look - max_looks
        return last / (j * (j + 1))
    return spent_alpha(look / max_looks, alpha, spending) - spent_alpha((look - 1) / max_looks, alpha, spending)


def past_plan_warning(look: int, policy: AnalysisPolicy) -> str | None:
    """The line a window past the planned looks carries: the plan ran out and how it was extended."""
    if look <= policy.max_looks:
        return None
    return (
        f"look {look} is past the {policy.max_looks} planned looks: the plan is extended (look K+j gets "
        "alpha_K / (j (j+1))), so the rollout's false-rollback bound is now alpha + alpha_K; raise "
        "analysis.max_looks if the rollout needs this many judged windows"
    )


def spends_look(analysis: WindowAnalysis) -> bool:
    """Whether a window ran a test at its look's threshold (and so used its share of alpha). A window where
    no test could run (no evidence) spends nothing: the next window takes the same look."""
    return any(r.p_value is not None for r in analysis.results)


def why_inconclusive(analysis: WindowAnalysis) -> str:
    """Why a window could not be judged, in its first undecided result's words ("" unless INCONCLUSIVE): a hold
    says "no in-flight stratum holds 5 requests of each pool" when that is the cause, not "too little traffic"."""
    if analysis.verdict != "INCONCLUSIVE":
        return ""
    undecided = [r.text for r in analysis.results if r.verdict == "INCONCLUSIVE"]
    why = undecided[0] if undecided else "no request in this window"
    return f"{why}; {analysis.hold_estimate}" if analysis.hold_estimate else why


def hold_estimate(analysis: WindowAnalysis, window_s: float, percent: float) -> str:
    """For an undecided window, the window length that this traffic would need to decide every result, from each
    result's ``scale_needed`` (too few requests, too little power), or "" when no result says (strata that do not
    overlap, no candidate request at all): the operator learns at the first hold, not after an hour of them."""
    undecided = [r for r in analysis.results if r.verdict == "INCONCLUSIVE"]
    scales = [r.scale_needed for r in undecided if r.scale_needed is not None]
    if not undecided or len(scales) < len(undecided):
        return ""
    seconds = max(scales) * window_s
    return (
        f"at {percent:g} % on this traffic a judged window needs about {seconds:.0f} s (analysis.window_s is "
        f"{window_s:g}): raise window_s, or add a control pool"
    )


def with_extra_results(analysis: WindowAnalysis, extra: Sequence[MetricResult]) -> WindowAnalysis:
    """The window's analysis with results of other sources (the pool gauges) added, verdict recomputed.

    A window whose own evidence is INCONCLUSIVE (too few requests, no overlapping strata, no records at all)
    stays INCONCLUSIVE whatever the gauges say: a step never advances and a rollout never promotes on gauges
    alone (before this rule, six empty windows at 0.2 requests/s passed on the two gauges and promoted)."""
    if not extra:
        return analysis
    results = [*analysis.results, *extra]
    verdict = window_verdict(results)
    if analysis.verdict == "INCONCLUSIVE" or not analysis.results:
        verdict = "INCONCLUSIVE"
    return analysis.model_copy(update={"results": results, "verdict": verdict})


def error_control_text(policy: AnalysisPolicy) -> str:
    name = "Pocock" if policy.spending == "pocock" else "O'Brien-Fleming"
    return ERROR_CONTROL.format(spending=name, alpha=policy.alpha, max_looks=policy.max_looks)


# ---- strata -----------------------------------------------------------------------------------------------


# Coarser bands tried, in order, when no power-of-two stratum holds enough of both pools: at small weights the
# candidate's replicas run at 0-1 in flight while the baseline's run higher, and the fine bins never overlap.
COARSENING = (0, 1, 2)


def stratum(in_flight: int, coarse: int = 0) -> int:
    """The power-of-two bin of an in-flight count: 0 -> 0, 1 -> 1, 2-3 -> 2, 4-7 -> 3, ...; ``coarse`` merges
    2^coarse adjacent bins (1: {0-1}, {2-7}, {8-31}, ...; 2: {0-7}, {8-127}, ...)."""
    return in_flight.bit_length() >> coarse


def _by_stratum(samples: Sequence[RequestSample], coarse: int = 0) -> dict[int, list[RequestSample]]:
    out: dict[int, list[RequestSample]] = {}
    for s in samples:
        out.setdefault(stratum(s.in_flight, coarse), []).append(s)
    return out


def common_strata(base: Sequence[RequestSample], cand: Sequence[RequestSample], min_each: int, coarse: int = 0) -> list[int]:
    """Strata where both arms have at least ``min_each`` requests, in order."""
    b, c = _by_stratum(base, coarse), _by_stratum(cand, coarse)
    return sorted(k for k in b.keys() & c.keys() if len(b[k]) >= min_each and len(c[k]) >= min_each)


def overlap_shares(
    base: Sequence[RequestSample], cand: Sequence[RequestSample], strata: Sequence[int], coarse: int = 0
) -> tuple[float, float]:
    """The share of each arm's requests that fall in the given strata."""
    keep = set(strata)

    def share(xs: Sequence[RequestSample]) -> float:
        return sum(stratum(s.in_flight, coarse) in keep for s in xs) / len(xs) if xs else 0.0

    return share(base), share(cand)


def matched_baseline(
    base: Sequence[RequestSample],
    cand: Sequence[RequestSample],
    strata: Sequence[int],
    rng: np.random.Generator,
    coarse: int = 0,
) -> tuple[list[RequestSample], list[RequestSample]]:
    """A baseline subsample with the candidate's stratum mix, and the candidate's requests in those strata.

    The subsample is as large as the scarcest stratum allows: m_s = floor(N p_s) for the candidate's shares
    p_s, with the largest N such that no stratum needs more baseline requests than it has.
    """
    b, c = _by_stratum(base, coarse), _by_stratum(cand, coarse)
    n_cand = sum(len(c[k]) for k in strata)
    shares = {k: len(c[k]) / n_cand for k in strata}
    total = min(len(b[k]) / shares[k] for k in strata)
    chosen: list[RequestSample] = []
    for k in strata:
        m = max(1, math.floor(total * shares[k] + 1e-9))
        idx = rng.choice(len(b[k]), size=min(m, len(b[k])), replace=False)
        chosen.extend(b[k][i] for i in sorted(idx))
    return chosen, [s for k in strata for s in c[k]]


# ---- tests ------------------------------------------------------------------------------------------------


def _request_values(samples: Sequence[RequestSample], metric: str) -> list[list[float]]:
    """One list of values per successful request that has the metric (a Repetition of ab_statistics)."""
    return [list(s.values[metric]) for s in samples if s.ok and s.values.get(metric)]


def worse_sign(rule: MetricRule) -> float:
    return 1.0 if rule.direction == "lower_is_better" else -1.0


def rank_test_worse(base: Sequence[float], cand: Sequence[float], sign: float) -> float | None:
    """One-sided Mann-Whitney p-value for "the candidate is worse" (larger when sign > 0, smaller when < 0)."""
    if len(base) < 2 or len(cand) < 2:
        return None
    alternative = "greater" if sign > 0 else "less"
    return float(stats.mannwhitneyu(np.asarray(cand), np.asarray(base), alternative=alternative).pvalue)


def van_elteren_worse(strata_pairs: Sequence[tuple[Sequence[float], Sequence[float]]], sign: float) -> float | None:
    """One-sided stratified Wilcoxon (van Elteren) p-value for "the candidate is worse", over (base, cand) strata.

    Per stratum U counts the (candidate, baseline) pairs where the candidate is larger (ties half), with
    mean n_b n_c / 2 and variance n_b n_c (n_b + n_c + 1) / 12 (no tie correction: latencies are continuous);
    strata are weighted 1 / (n_b + n_c + 1), van Elteren's locally most powerful weights.
    """
    num = 0.0
    var = 0.0
    for base, cand in strata_pairs:
        nb, nc = len(base), len(cand)
        if nb == 0 or nc == 0:
            continue
        ranks = stats.rankdata(np.concatenate([np.asarray(cand, dtype=float), np.asarray(base, dtype=float)]))
        u = float(np.sum(ranks[:nc])) - nc * (nc + 1) / 2
        w = 1.0 / (nb + nc + 1)
        num += w * (u - nb * nc / 2)
        var += w * w * nb * nc * (nb + nc + 1) / 12
    if var <= 0:
        return None
    z = sign * num / math.sqrt(var)
    return float(stats.norm.sf(z))


def _means(reqs: Sequence[Sequence[float]]) -> list[float]:
    # sum / len, not np.mean: thousands of short lists per window, where numpy's call overhead dominates
    return [sum(r) / len(r) for r in reqs]


def beyond_budget(rule: MetricRule, ratio: float) -> bool:
    if not math.isfinite(ratio):
        return False
    return ratio > 1 + rule.budget if rule.direction == "lower_is_better" else ratio < 1 - rule.budget


def _latency_result(
    segment: str,
    rule: MetricRule,
    arms: SegmentSamples,
    comparison: Comparison,
    threshold: float,
    policy: AnalysisPolicy,
    rng: np.random.Generator,
    seed: int,
) -> MetricResult:
    base_all = arms.control if comparison == "control" and arms.control is not None else arms.baseline
    base_reqs, cand_reqs = _request_values(base_all, rule.metric), _request_values(arms.candidate, rule.metric)
    common: dict[str, object] = {"segment": segment, "metric": rule.name, "comparison": comparison}
    common |= {"threshold": threshold, "budget": rule.budget, "n_baseline": len(base_reqs), "n_candidate": len(cand_reqs)}
    if min(len(base_reqs), len(cand_reqs)) < policy.min_samples:
        return _too_few(common, segment, rule, policy, len(base_reqs), len(cand_reqs), "")
    sign = worse_sign(rule)
    if comparison == "stratified":
        base_ok = [s for s in base_all if s.ok and s.values.get(rule.metric)]
        cand_ok = [s for s in arms.candidate if s.ok and s.values.get(rule.metric)]
        coarse, strata = next(
            ((c, st) for c in COARSENING if (st := common_strata(base_ok, cand_ok, policy.min_stratum_samples, c))), (0, [])
        )
        if not strata:
            text = (
                f"{segment} {rule.name}: no in-flight stratum holds {policy.min_stratum_samples} requests of each pool, "
                f"even in bands of {2 ** COARSENING[-1]} power-of-two bins ({len(base_ok)} baseline / {len(cand_ok)} "
                "candidate requests whose loads do not overlap); a control pool compares at equal load"
            )
            return MetricResult.model_validate(common | {"verdict": "INCONCLUSIVE", "text": text})
        b_by, c_by = _by_stratum(base_ok, coarse), _by_stratum(cand_ok, coarse)
        pairs = [(_means(_request_values(b_by[k], rule.metric)), _means(_request_values(c_by[k], rule.metric))) for k in strata]
        p = van_elteren_worse(pairs, sign)
        b_match, c_match = matched_baseline(base_ok, cand_ok, strata, rng, coarse)
        base_reqs, cand_reqs = _request_values(b_match, rule.metric), _request_values(c_match, rule.metric)
        # The verdict rests on the matched subsample, not on the pools as they came: count that one.
        common |= {"n_baseline": len(base_reqs), "n_candidate": len(cand_reqs)}
        if min(len(base_reqs), len(cand_reqs)) < policy.min_samples:
            where = " in the common in-flight strata"
            return _too_few(common, segment, rule, policy, len(base_reqs), len(cand_reqs), where)
    else:
        p = rank_test_worse(_means(base_reqs), _means(cand_reqs), sign)
    ratio, q = _resolvable_ratio(rule, base_reqs, cand_reqs, policy, seed)
    if ratio is None:
        need = observations_needed(PERCENTILE_FALLBACK[-1], policy.min_tail)
        text = f"{segment} {rule.name}: no percentile down to p50 has {policy.min_tail} observations beyond it"
        return MetricResult.model_validate(
            common | {"verdict": "INCONCLUSIVE", "text": text, "scale_needed": need / min(len(base_reqs), len(cand_reqs))}
        )
    power, scale = _power(rule, base_reqs, len(base_reqs), len(cand_reqs), threshold, policy)
    significant = p is not None and p < threshold
    beyond = beyond_budget(rule, ratio.ratio)
    verdict: WindowVerdict = "FAIL" if significant and beyond else "PASS"
    verdict = gate_on_power(verdict, power, policy)
    p_text = "n/a" if p is None else f"{p:.3g}"
    tail = observations_needed(rule.percentile, policy.min_tail)
    at = "" if q == rule.percentile else f" judged at p{q * 100:g} (p{rule.percentile * 100:g} needs {tail} observations)"
    power_text = "" if power is None else f", power {power:.0%} to see {_budget_text(rule)}"
    text = (
        f"{segment} {rule.name} ({comparison}){at}: ratio {ratio.ratio:.3f} [{ratio.ci_low:.3f}, {ratio.ci_high:.3f}], "
        f"budget {rule.budget:.0%}, one-sided p {p_text} vs {threshold:.3g}{power_text}: {verdict}"
    )
    if verdict == "INCONCLUSIVE":
        text += underpowered_note(scale, policy, "requests")
    return MetricResult.model_validate(
        common
        | {
            "verdict": verdict,
            "ratio": ratio,
            "p_value": p,
            "baseline_value": ratio.baseline,
            "candidate_value": ratio.candidate,
            "text": text,
            "percentile": q,
            "power": power,
            "scale_needed": scale if verdict == "INCONCLUSIVE" else None,
        }
    )


# When the rule's percentile has too few observations beyond it (``min_tail``), the ratio is judged at the next
# of these that has them, as Gate 4's verdict falls back from P99 (issue 26: a P99 on 10 requests was a PASS).
PERCENTILE_FALLBACK = (0.90, 0.50)


def _resolvable_ratio(
    rule: MetricRule, base: list[list[float]], cand: list[list[float]], policy: AnalysisPolicy, seed: int
) -> tuple[RatioResult | None, float]:
    """The percentile ratio at the rule's percentile, or at the highest fallback with enough tail observations."""
    for q in (rule.percentile, *(f for f in PERCENTILE_FALLBACK if f < rule.percentile)):
        ratio = compare_percentile([base], [cand], q, resamples=policy.resamples, seed=seed, min_tail=policy.min_tail)
        if ratio.enough_samples:
            return ratio, q
    return None, rule.percentile


def _budget_text(rule: MetricRule) -> str:
    return f"{'+' if rule.direction == 'lower_is_better' else '-'}{rule.budget:.0%}"


def _power(
    rule: MetricRule, base: list[list[float]], n_b: int, n_c: int, threshold: float, policy: AnalysisPolicy
) -> tuple[float | None, float | None]:
    """The rank test's power to see the budget and, below ``min_power``, the scale of window that reaches it.
    None for a budget of 0 (no effect size to have power against) or a rule with ``min_power`` 0."""
    if rule.budget <= 0 or policy.min_power <= 0:
        return None, None
    return power_at(shifted_superiority(_means(base), budget_factor(rule), worse_sign(rule)), n_b, n_c, threshold, policy)


def budget_factor(rule: MetricRule) -> float:
    """The candidate's values as the baseline's times this: a regression of exactly the budget."""
    return 1 + rule.budget if worse_sign(rule) > 0 else 1 - rule.budget


def power_at(
    p_worse: float | None, n_b: int, n_c: int, threshold: float, policy: AnalysisPolicy
) -> tuple[float | None, float | None]:
    """Noether's power for this p' (both judges' tests), and below ``min_power`` the window scale that reaches it."""
    if p_worse is None:
        return None, None
    power = rank_test_power(p_worse, n_b, n_c, threshold)
    scale = scale_for_power(p_worse, n_b, n_c, threshold, policy.min_power) if power < policy.min_power else None
    return power, scale


def gate_on_power(verdict: WindowVerdict, power: float | None, policy: AnalysisPolicy) -> WindowVerdict:
    """A PASS without ``min_power`` to see the budget is INCONCLUSIVE (both judges)."""
    return "INCONCLUSIVE" if verdict == "PASS" and power is not None and power < policy.min_power else verdict


def underpowered_note(scale: float | None, policy: AnalysisPolicy, what: str) -> str:
    """What an underpowered result adds to its text; ``what`` counts the window (requests, observations)."""
    more = "" if scale is None else f"; about {scale:.1f}x this window's {what} would reach it"
    return f" (not significantly worse, but a pass needs power {policy.min_power:.0%}{more})"


def _too_few(
    common: dict[str, object], segment: str, rule: MetricRule, policy: AnalysisPolicy, nb: int, nc: int, where: str
) -> MetricResult:
    counts = f"{nb} baseline / {nc} candidate requests{where}"
    prefix = "matched " if where else ""
    text = f"{segment} {rule.name}: {prefix}{counts}, fewer than {policy.min_samples}"
    scale = policy.min_samples / min(nb, nc) if min(nb, nc) > 0 else None
    return MetricResult.model_validate(common | {"verdict": "INCONCLUSIVE", "text": text, "scale_needed": scale})


def _error_result(
    segment: str, arms: SegmentSamples, comparison: Comparison, threshold: float, policy: AnalysisPolicy, budget: float
) -> MetricResult:
    """Error rate of the proxy's attempts. Errors are not stratified: whether a request fails depends far less
    on load than its latency does."""
    base = arms.control if comparison == "control" and arms.control is not None else arms.baseline
    eb, ec = sum(not s.ok for s in base), sum(not s.ok for s in arms.candidate)
    return error_rate_result(
        segment, (eb, len(base)), (ec, len(arms.candidate)), comparison, threshold, policy.min_samples, budget
    )


def error_rate_result(
    segment: str,
    baseline: tuple[int, int],
    candidate: tuple[int, int],
    comparison: Comparison,
    threshold: float,
    min_samples: int,
    budget: float,
) -> MetricResult:
    """Error rate from (errors, total) per pool: one-sided Fisher exact test for a higher candidate rate, gated
    by the budget in points. The proxy's attempts and the engines' 5xx counters (histogram_judge) both use it."""
    (eb, nb), (ec, nc) = baseline, candidate
    common: dict[str, object] = {"segment": segment, "metric": "error_rate", "comparison": comparison}
    common |= {"threshold": threshold, "budget": budget, "n_baseline": nb, "n_candidate": nc}
    if min(nb, nc) < min_samples:
        text = f"{segment} error_rate: {nb} baseline / {nc} candidate requests, fewer than {min_samples}"
        return MetricResult.model_validate(common | {"verdict": "INCONCLUSIVE", "text": text})
    rb, rc = eb / nb, ec / nc
    p = float(stats.fisher_exact([[ec, nc - ec], [eb, nb - eb]], alternative="greater")[1])
    verdict: WindowVerdict = "FAIL" if p < threshold and rc - rb > budget else "PASS"
    text = (
        f"{segment} error_rate ({comparison}): {rc:.2%} vs {rb:.2%}, budget +{budget * 100:g} points, "
        f"p {p:.3g} vs {threshold:.3g}: {verdict}"
    )
    return MetricResult.model_validate(
        common | {"verdict": verdict, "p_value": p, "baseline_value": rb, "candidate_value": rc, "text": text}
    )


def window_verdict(results: Sequence[MetricResult]) -> WindowVerdict:
    """A window's verdict over its results: FAIL if any fails, else INCONCLUSIVE if any is (or none was
    judged), else PASS."""
    verdicts = {r.verdict for r in results}
    return "FAIL" if "FAIL" in verdicts else "INCONCLUSIVE" if "INCONCLUSIVE" in verdicts or not results else "PASS"


def analyse_window(
    policy: AnalysisPolicy,
    segments: Mapping[str, SegmentSamples],
    look: int,
    *,
    matching: Matching = "auto",
    seed: int = 0,
) -> WindowAnalysis:
    """One window's verdict: FAIL when any test of any segment fails, else INCONCLUSIVE when any lacks samples, else PASS.

    ``look`` is the window's number in the rollout (1-based), which fixes its share of alpha. A segment too
    small to judge keeps the window INCONCLUSIVE (it holds): the controller merges rare segments before
    calling this if they should not hold the rollout.
    """
    has_control = bool(segments) and all(s.control is not None for s in segments.values())
    comparison: Comparison = "naive" if matching == "naive" else ("control" if has_control else "stratified")
    n_tests = len(segments) * (len(policy.metrics) + (policy.max_error_rate_increase is not None))
    alpha_k = look_alpha(look, policy.alpha, policy.max_looks, policy.spending)
    threshold = alpha_k / max(n_tests, 1)
    rng = np.random.default_rng(seed)
    results: list[MetricResult] = []
    warnings: list[str] = []
    for segment, arms in segments.items():
        if comparison == "stratified":
            warnings.extend(_overlap_warnings(segment, arms, policy))
        for i, rule in enumerate(policy.metrics):
            results.append(_latency_result(segment, rule, arms, comparison, threshold, policy, rng, seed + i))
        if policy.max_error_rate_increase is not None:
            results.append(_error_result(segment, arms, comparison, threshold, policy, policy.max_error_rate_increase))
    verdict = window_verdict(results)
    past = past_plan_warning(look, policy)
    if past:
        warnings.append(past)
    if comparison == "naive":
        warnings.append("naive comparison: the pools' loads differ, which can flatter the less loaded candidate")
    return WindowAnalysis(
        look=look,
        verdict=verdict,
        comparison=comparison,
        alpha_look=alpha_k,
        results=results,
        warnings=warnings,
        error_control=error_control_text(policy),
    )


def _overlap_warnings(segment: str, arms: SegmentSamples, policy: AnalysisPolicy) -> list[str]:
    base = [s for s in arms.baseline if s.ok]
    cand = [s for s in arms.candidate if s.ok]
    strata = common_strata(base, cand, policy.min_stratum_samples)
    sb, sc = overlap_shares(base, cand, strata)
    if base and cand and min(sb, sc) < policy.min_overlap:
        return [
            f"{segment}: the in-flight strata barely overlap: the common strata hold {sb:.0%} of the baseline's "
            f"and {sc:.0%} of the candidate's requests (warning below {policy.min_overlap:.0%}); the matched "
            "comparison rests on that share"
        ]
    return []
