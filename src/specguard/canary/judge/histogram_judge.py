"""The canary's window verdict from the pools' server-side histograms, for pools behind HAProxy or a Gateway. Pure.

There specguard sees no request at the boundary; what it has are each vLLM server's cumulative latency
histograms (``server_metrics.names.HISTOGRAMS``: itl, ttft, e2e, tpot), read at the window's step times,
the engine's 5xx counters and the pool gauges. The verdict types, the alpha spending and the effect-size
gate are ``canary.judge.window``'s, so ``decision.decide`` and the report take the result unchanged; the window
says ``source="server_histograms"`` and names its tests in ``method`` and in every metric's ``test``.

Input: per segment ("all", or a model when the segment is the model: vLLM's series know only
``model_name``), per pool, per canonical histogram name, one list of cumulative reads per server (not
merged by the caller: a server that restarted must be seen before the sums hide it).

The definitions (``HISTOGRAM_DEFINITIONS``, quoted by the report):

* STEP_POINTS: the per-step test (Kayenta's per-step points as the samples);
* WINDOW_DISTRIBUTION: the window's bucket distribution compared directly, which gives the ratio;
* VERDICT: how they combine. Both tests must reject (an intersection-union test, p = the larger p-value):
  its false-FAIL rate is at most the look's threshold whenever either test is valid, so the per-step test
  guards against the bucket test's independence assumption (tokens of one request are not independent).
  Windows with too few steps for the per-step test to reach the threshold at all use the window test alone,
  and say so.

Caveat the warnings repeat: vLLM observes ITL once per engine step per request, and with speculation a step
emits up to k+1 tokens, so the server-side ITL of a speculative candidate is per step, not per token, and
not the per-token ITL that ``bench`` and the proxy measure. TPOT (per request) is per token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import Field

from specguard.analysis.ab_statistics import min_samples
from specguard.canary.judge.histogram_tests import (
    PoolDeltas,
    binned_shift_superiority,
    bucket_rank_test,
    can_reject,
    censored,
    pool_deltas,
    quantile_ratio,
    step_point_test,
    step_points,
)
from specguard.canary.judge.policy import gauge_results
from specguard.canary.judge.window import (
    AnalysisPolicy,
    Comparison,
    MetricResult,
    MetricRule,
    WindowAnalysis,
    WindowVerdict,
    beyond_budget,
    budget_factor,
    error_control_text,
    error_rate_result,
    gate_on_power,
    look_alpha,
    past_plan_warning,
    power_at,
    underpowered_note,
    window_verdict,
    with_extra_results,
    worse_sign,
)
from specguard.canary.spec.rollout import MetricBudget
from specguard.errors import UsageError
from specguard.models_base import StrictModel
from specguard.server_metrics.histograms import Histogram

__all__ = [
    "HISTOGRAM_DEFINITIONS",
    "HISTOGRAM_METRICS",
    "METHOD",
    "STEP_POINTS",
    "VERDICT",
    "WINDOW_DISTRIBUTION",
    "SegmentHistograms",
    "histogram_metric_result",
    "judge_histogram_window",
]

# The analysis' metric keys -> server_metrics.names.HISTOGRAMS' canonical names.
HISTOGRAM_METRICS: dict[str, str] = {"itl_ms": "itl", "ttft_ms": "ttft", "e2e_ms": "e2e", "tpot_ms": "tpot"}

STEP_POINTS = (
    "per-step points: each step's delta histogram (between consecutive reads, the pool's servers summed) gives "
    "one point, its percentile as PromQL's histogram_quantile computes it, if the step holds at least "
    "ceil(min_tail_samples / (1 - percentile)) observations; test: one-sided Mann-Whitney U of the candidate's "
    "points against the baseline's points multiplied by (1 + budget) (by (1 - budget) when higher is better), "
    "so that it rejects only for a worsening beyond the budget; used when each pool has enough points that a "
    "complete separation could reject at this look, 1 / C(m + n, m) < threshold"
)
WINDOW_DISTRIBUTION = (
    "window distribution: the window's delta histogram per pool (the sum of its steps); ratio: candidate / "
    "baseline of histogram_quantile(percentile), with a 95 % parametric-bootstrap interval (each pool's bucket "
    "counts redrawn multinomially from its own bucket shares, the quantile recomputed); test: one-sided "
    "Mann-Whitney U on the observations as their bucket index (a bucket is one tie group, tie-corrected "
    "normal approximation): does the candidate's mass sit in worse buckets?"
)
VERDICT = (
    "FAIL when the window ratio is beyond the budget AND the test rejects at this look's threshold; the test is "
    "both tests together when the per-step test can reject (intersection-union: p = the larger of the two "
    "p-values), the window distribution test alone otherwise; INCONCLUSIVE when the window distribution test "
    "rejects with the ratio's whole interval beyond the budget but the per-step test does not (a FAIL "
    "unconfirmed is no pass), "
    "when a pool's window holds fewer "
    "than min_samples observations or fewer than min_tail_samples beyond the percentile, when a server's "
    "counts fell between reads (a restart: reported, not judged) or the buckets differ, and when the window "
    "test's power to see the budget (Noether's formula on the baseline's buckets shifted by 1 + budget; an upper "
    "bound when the per-step test joins it) is below min_power: a pass needs the power to have seen a regression"
)
METHOD = f"source: server-side histograms (vLLM /metrics), Kayenta-style. {STEP_POINTS}. {WINDOW_DISTRIBUTION}. {VERDICT}."
HISTOGRAM_DEFINITIONS: dict[str, str] = {
    "source": "server-side histograms: the pools' vLLM servers' own latency histograms, 5xx counters and gauges",
    "step points": STEP_POINTS,
    "window distribution": WINDOW_DISTRIBUTION,
    "verdict": VERDICT,
    "error_rate": "5xx responses / all responses per pool in the window, from the engine's (HAProxy's or the "
    "gateway's) counters; one-sided Fisher exact test, budget in points",
}
ITL_PER_STEP = (
    "server-side ITL is observed once per engine step per request; a speculative step emits up to k+1 tokens, "
    "so the candidate's ITL here is per step, not per token (TPOT is per token)"
)
_BOTH = "step points + window distribution"
_WINDOW_ONLY = "window distribution only"

PoolSeries = dict[str, list[list[Histogram]]]  # canonical name -> per server, cumulative reads at the step times


class SegmentHistograms(StrictModel):
    """One segment's histograms per pool; ``control`` only when a control pool exists."""

    baseline: PoolSeries
    candidate: PoolSeries
    control: PoolSeries | None = Field(default=None, description="a baseline replica given the candidate's share")


def _inconclusive(common: dict[str, object], text: str) -> MetricResult:
    return MetricResult.model_validate(common | {"verdict": "INCONCLUSIVE", "text": text})


def histogram_metric_result(
    segment: str,
    rule: MetricRule,
    base: PoolDeltas,
    cand: PoolDeltas,
    comparison: Comparison,
    threshold: float,
    policy: AnalysisPolicy,
    seed: int = 0,
) -> MetricResult:
    """One latency metric of one segment from the pools' deltas (``histogram_tests.pool_deltas``): the two
    tests, the budget gate, the not-enough-data rules."""
    common: dict[str, object] = {"segment": segment, "metric": rule.name, "comparison": comparison}
    common |= {"threshold": threshold, "budget": rule.budget, "n_baseline": 0, "n_candidate": 0}
    name = HISTOGRAM_METRICS.get(rule.metric, rule.metric)
    head = f"{segment} {rule.name} (server-side histograms, {comparison})"
    reference = "control" if comparison == "control" else "baseline"
    for pool, d in ((reference, base), ("candidate", cand)):
        if d.problem is not None:
            what = "reported, not judged" if d.restart else "not judged"
            return _inconclusive(common, f"{head}: {pool} {name}: {d.problem}; {what}")
    wb, wc = base.window, cand.window
    if wb is None or wc is None:  # pool_deltas gives a window whenever it names no problem
        return _inconclusive(common, f"{head}: no window delta")
    nb, nc = round(wb.count), round(wc.count)
    common |= {"n_baseline": nb, "n_candidate": nc}
    need = max(policy.min_samples, min_samples(rule.percentile, policy.min_tail))
    if min(nb, nc) < need:
        why = f"fewer than {policy.min_samples}, or than {policy.min_tail} beyond the percentile"
        return _inconclusive(common, f"{head}: {nb} {reference} / {nc} candidate observations, {why}")
    if wb.bounds != wc.bounds:
        return _inconclusive(common, f"{head}: the pools' {name} buckets differ; not judged")
    sign = worse_sign(rule)
    rng = np.random.default_rng(seed)
    ratio = quantile_ratio(wb, wc, rule.percentile, resamples=policy.resamples, rng=rng, min_tail=policy.min_tail)
    if ratio is None:
        return _inconclusive(common, f"{head}: the baseline's percentile is 0; no ratio")
    p_window = bucket_rank_test(wb, wc, sign)
    per_step = min_samples(rule.percentile, policy.min_tail)
    pts_b = step_points(base.steps, rule.percentile, per_step)
    pts_c = step_points(cand.steps, rule.percentile, per_step)
    points = f"{len(pts_b)}/{len(pts_c)} step points"
    if can_reject(len(pts_b), len(pts_c), threshold):
        p_steps = step_point_test(pts_b, pts_c, rule.budget, sign)
        test = _BOTH
        p = None if p_steps is None or p_window is None else max(p_steps, p_window)
        p_text = f"p steps {_fmt(p_steps)}, p window {_fmt(p_window)}"
    else:
        test, p, p_text = _WINDOW_ONLY, p_window, f"p window {_fmt(p_window)} ({points}: too few to reject)"
    verdict: WindowVerdict = "FAIL" if p is not None and p < threshold and beyond_budget(rule, ratio.ratio) else "PASS"
    # The per-step test may veto a FAIL (it guards against the window test's independence assumption), but its
    # silence is no pass when the window is worse beyond the budget with confidence (the window test rejects and
    # the ratio's interval lies beyond the budget): with 6 points a pool it rejects only at a complete
    # separation, and a 1.5x candidate passed 25 of 180 windows of 3,000 observations before this rule
    # (tests/unit/canary/test_histogram_rule_oc.py). A candidate within the budget whose interval reaches it
    # (1.05x, over coarse buckets) still passes.
    surely_beyond = beyond_budget(rule, ratio.ci_low if worse_sign(rule) > 0 else ratio.ci_high)
    unconfirmed = verdict == "PASS" and test == _BOTH and surely_beyond and p_window is not None and p_window < threshold
    verdict = "INCONCLUSIVE" if unconfirmed else verdict
    power, scale = _window_test_power(rule, wb, nb, nc, threshold, policy)
    verdict = gate_on_power(verdict, power, policy)
    notes = [
        f"{pool} p{rule.percentile * 100:g} beyond the last finite bucket"
        for pool, w in ((reference, wb), ("candidate", wc))
        if censored(w, rule.percentile)
    ]
    text = (
        f"{head}: ratio {ratio.ratio:.3f} [{ratio.ci_low:.3f}, {ratio.ci_high:.3f}], budget {rule.budget:.0%}, "
        f"{test}: {p_text}, one-sided p {_fmt(p)} vs {threshold:.3g}{''.join(f'; {n}' for n in notes)}"
        f"{'' if power is None else f', power {power:.0%} to see the budget'}: {verdict}"
    )
    if unconfirmed:
        text += (
            " (the window test rejects and the ratio's interval lies beyond the budget; "
            "the per-step points do not confirm it: no pass)"
        )
    elif verdict == "INCONCLUSIVE":
        text += underpowered_note(scale, policy, "observations")
    return MetricResult.model_validate(
        common
        | {
            "verdict": verdict,
            "ratio": ratio,
            "p_value": p,
            "baseline_value": ratio.baseline,
            "candidate_value": ratio.candidate,
            "text": text,
            "test": test,
            "power": power,
            "scale_needed": scale if verdict == "INCONCLUSIVE" else None,
        }
    )


def _window_test_power(
    rule: MetricRule, base: Histogram, nb: int, nc: int, threshold: float, policy: AnalysisPolicy
) -> tuple[float | None, float | None]:
    """The window distribution test's power to see the budget (Noether, ``rank_power``), with the baseline's
    buckets shifted by 1 + budget. With the per-step test too (intersection-union), this is an upper bound."""
    if rule.budget <= 0 or policy.min_power <= 0:
        return None, None
    return power_at(binned_shift_superiority(base, budget_factor(rule), worse_sign(rule)), nb, nc, threshold, policy)


def _fmt(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.3g}"


def _error_rate(
    errors: Mapping[str, tuple[float, float]],
    reference: str,
    comparison: Comparison,
    threshold: float,
    policy: AnalysisPolicy,
    budget: float,
) -> MetricResult:
    eb, nb = (round(x) for x in errors.get(reference, (0, 0)))
    ec, nc = (round(x) for x in errors.get("candidate", (0, 0)))
    r = error_rate_result("all", (eb, nb), (ec, nc), comparison, threshold, policy.min_samples, budget)
    return r.model_copy(update={"text": f"{r.text} (5xx / responses, engine counters)", "test": "Fisher exact"})


def judge_histogram_window(
    policy: AnalysisPolicy,
    segments: Mapping[str, SegmentHistograms],
    look: int,
    *,
    errors: Mapping[str, tuple[float, float]] | None = None,
    gauge_budgets: Sequence[MetricBudget] = (),
    gauges: Mapping[str, Mapping[str, float]] | None = None,
    seed: int = 0,
) -> WindowAnalysis:
    """One window's verdict from server-side histograms: FAIL when any metric fails, else INCONCLUSIVE when any
    lacks data, else PASS (as ``window.analyse_window``).

    ``errors``: per pool ("baseline", "candidate", "control"), (5xx responses, all responses) in the window,
    from the engine's counters; None: the error rate is not judged (a warning says so). ``gauges``: as
    ``policy.gauge_results`` takes them (mean per server over the window), judged by ``gauge_budgets``.
    """
    has_control = bool(segments) and all(s.control is not None for s in segments.values())
    comparison: Comparison = "control" if has_control else "naive"
    reference = "control" if has_control else "baseline"
    judge_errors = errors is not None and policy.max_error_rate_increase is not None
    n_tests = len(segments) * len(policy.metrics) + judge_errors
    alpha_k = look_alpha(look, policy.alpha, policy.max_looks, policy.spending)
    threshold = alpha_k / max(n_tests, 1)
    results: list[MetricResult] = []
    warnings: list[str] = []
    for segment, pools in segments.items():
        ref = pools.control if has_control and pools.control is not None else pools.baseline
        for i, rule in enumerate(policy.metrics):
            name = HISTOGRAM_METRICS.get(rule.metric)
            if name is None:
                raise UsageError(f"vLLM has no server-side histogram of {rule.metric}")
            deltas = {
                pool: pool_deltas(series.get(name, [])) for pool, series in (("baseline", ref), ("candidate", pools.candidate))
            }
            r = histogram_metric_result(
                segment, rule, deltas["baseline"], deltas["candidate"], comparison, threshold, policy, seed + i
            )
            if any(d.restart for d in deltas.values()):
                warnings.append(r.text)
            results.append(r)
    if errors is not None and policy.max_error_rate_increase is not None:
        results.append(_error_rate(errors, reference, comparison, threshold, policy, policy.max_error_rate_increase))
    elif policy.max_error_rate_increase is not None:
        warnings.append("error rate not judged: no 5xx counters of the engine in this window")
    # Gauges are compared with the latency's reference pool and never decide a window on their own.
    extra = gauge_results(gauge_budgets, gauges, reference) if gauges is not None else []
    if any(r.metric.endswith("_itl_ms") for r in results):
        warnings.append(ITL_PER_STEP)
    if comparison == "naive":
        warnings.append("naive comparison: the pools' loads differ, which can flatter the less loaded candidate")
    past = past_plan_warning(look, policy)
    if past:
        warnings.append(past)
    verdict = window_verdict(results)
    analysis = WindowAnalysis(
        look=look,
        verdict=verdict,
        comparison=comparison,
        alpha_look=alpha_k,
        results=results,
        warnings=warnings,
        error_control=error_control_text(policy),
        source="server_histograms",
        method=METHOD,
    )
    return with_extra_results(analysis, extra)
