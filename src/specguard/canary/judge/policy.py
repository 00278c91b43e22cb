"""From the rollout file and a window's records to what the analysis and the rollout rule take. Pure.

The rollout file says what an operator means (``p99`` ITL may be 10 % worse); ``canary.judge.window`` and
``canary.judge.decision`` take their own models so that they stay testable without a rollout. This module is the
one place that translates, and that turns the proxy's records into per-request samples with ``bench``'s
definitions (per-token ITL spreads each chunk gap over the chunk's tokens: ``analysis.request_metrics``).

Planned looks. The false-rollback rate is spent over a planned number of looks (``analysis.py``). A step
needs at least max(ceil(min_time_s / window_s), promote_windows) windows; the plan is twice the sum over
the steps, since windows without enough traffic (INCONCLUSIVE) and failing-then-passing windows take
looks too. Looks past the plan are extended with a stated tail (``analysis.look_alpha``), never judged at 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from specguard.analysis.request_metrics import per_token_itl, tpot
from specguard.canary.judge.decision import RolloutRule, StepRule
from specguard.canary.judge.window import (
    AnalysisPolicy,
    MetricResult,
    MetricRule,
    RequestSample,
    SegmentSamples,
    WindowAnalysis,
    analyse_window,
    hold_estimate,
    with_extra_results,
)
from specguard.canary.spec.rollout import LATENCY_METRICS, POOL_GAUGES, MetricBudget, Rollout
from specguard.canary.state.records import ProxiedRequest

__all__ = [
    "analysis_policy",
    "gauge_results",
    "judge_records",
    "planned_looks",
    "request_sample",
    "rollout_rule",
    "samples_by_segment",
]

_PERCENTILE = {"p50": 0.50, "p95": 0.95, "p99": 0.99}


def planned_looks(rollout: Rollout) -> int:
    a = rollout.analysis
    if a.max_looks is not None:
        return a.max_looks
    per_step = [max(math.ceil(s.min_time_s / a.window_s), a.promote_windows) for s in rollout.steps]
    return 2 * sum(per_step)


def analysis_policy(rollout: Rollout) -> AnalysisPolicy:
    """The window analysis' settings: latency budgets as percentile rules, the error-rate budget, error control."""
    a = rollout.analysis
    rules = [
        MetricRule(metric=m.metric, percentile=_PERCENTILE[m.percentile or "p99"], direction=m.direction, budget=m.budget)
        for m in a.metrics
        if m.metric in LATENCY_METRICS
    ]
    errors = [m.budget for m in a.metrics if m.metric == "error_rate"]
    return AnalysisPolicy(
        metrics=rules,
        max_error_rate_increase=errors[0] if errors else None,
        min_samples=a.min_samples,
        min_stratum_samples=a.min_stratum_samples,
        alpha=a.false_rollback_rate,
        max_looks=planned_looks(rollout),
        spending=a.spending,
        resamples=a.resamples,
        min_tail=a.min_tail_samples,
        min_power=a.min_power,
    )


def rollout_rule(rollout: Rollout) -> RolloutRule:
    return RolloutRule(
        steps=[StepRule(percent=s.percent, min_seconds=s.min_time_s, min_requests=s.min_requests) for s in rollout.steps],
        windows_to_rollback=rollout.analysis.rollback_windows,
        windows_to_promote=rollout.analysis.promote_windows,
    )


def request_sample(record: ProxiedRequest) -> RequestSample:
    """One attempt as an analysis sample, in milliseconds; a failed attempt carries no latency values."""
    values: dict[str, list[float]] = {}
    if record.ok and record.ttft_s is not None and record.e2e_s is not None:
        values["ttft_ms"] = [record.ttft_s * 1000.0]
        values["e2e_ms"] = [record.e2e_s * 1000.0]
        itl = per_token_itl(record.chunk_times_s, record.chunk_tokens)
        if itl:
            values["itl_ms"] = [v * 1000.0 for v in itl]
        t = tpot(record.ttft_s, record.e2e_s, record.output_tokens)
        if t is not None:
            values["tpot_ms"] = [t * 1000.0]
    return RequestSample(in_flight=record.in_flight, ok=record.ok, values=values)


def samples_by_segment(records: Sequence[ProxiedRequest], with_control: bool) -> dict[str, SegmentSamples]:
    """A window's attempts per segment and pool. Failed attempts that were retried count against their pool
    (the error rate); attempts the client abandoned count for nothing (the client's doing, not the pool's)."""
    out: dict[str, dict[str, list[RequestSample]]] = {}
    for r in records:
        if r.client_disconnected:
            continue
        arms = out.setdefault(r.segment, {"baseline": [], "candidate": [], "control": []})
        arms[r.pool].append(request_sample(r))
    return {
        seg: SegmentSamples(
            baseline=arms["baseline"], candidate=arms["candidate"], control=arms["control"] if with_control else None
        )
        for seg, arms in sorted(out.items())
    }


def gauge_results(
    budgets: Sequence[MetricBudget],
    gauges: Mapping[str, Mapping[str, float]],
    reference: str = "baseline",
    percent: float | None = None,
) -> list[MetricResult]:
    """The pool gauges (mean per server over the window's scrapes): candidate minus ``reference`` against the margin.

    ``reference`` is the pool the latency is compared with (``control`` when there is a control pool). At
    100 % (``percent``) no gauge is compared: the baseline is idle there and would flatter nothing but itself.

    No test: a gauge is read a handful of times per window and its reads are not independent; the margin is
    the operator's statement of how much worse is tolerable. A pool without readings makes it INCONCLUSIVE.
    """
    results: list[MetricResult] = []
    if percent is not None and percent >= 100:
        return results
    base, cand = gauges.get(reference, {}), gauges.get("candidate", {})
    for b in budgets:
        if b.metric not in POOL_GAUGES:
            continue
        common = {"segment": "all", "metric": b.metric, "comparison": "naive", "threshold": 0.0, "budget": b.budget}
        vb, vc = base.get(b.metric), cand.get(b.metric)
        if vb is None or vc is None:
            text = f"{b.metric}: no reading of the {reference if vb is None else 'candidate'} pool in this window"
            results.append(
                MetricResult.model_validate(common | {"verdict": "INCONCLUSIVE", "n_baseline": 0, "n_candidate": 0, "text": text})
            )
            continue
        worse = vc - vb if b.direction == "lower_is_better" else vb - vc
        verdict = "FAIL" if worse > b.budget else "PASS"
        text = f"{b.metric} per server: candidate {vc:.3g} vs {reference} {vb:.3g}, margin {b.budget:g}: {verdict}"
        results.append(
            MetricResult.model_validate(
                common
                | {
                    "verdict": verdict,
                    "n_baseline": 1,
                    "n_candidate": 1,
                    "baseline_value": vb,
                    "candidate_value": vc,
                    "text": text,
                }
            )
        )
    return results


def judge_records(
    rollout: Rollout,
    policy: AnalysisPolicy,
    records: Sequence[ProxiedRequest],
    gauges: Mapping[str, Mapping[str, float]],
    look: int,
    *,
    with_control: bool,
    percent: float,
) -> WindowAnalysis:
    """A window's records and gauges to its analysis, start to end, touching nothing shared: the controller
    runs it in a worker thread with the records handed over, so that the proxy's relay loop stays free (run on
    the loop it delayed chunks by up to 1 s: issue 26)."""
    segments = samples_by_segment(records, with_control)
    analysis = analyse_window(policy, segments, look, seed=look)
    estimate = hold_estimate(analysis, rollout.analysis.window_s, percent)
    if estimate:
        analysis = analysis.model_copy(update={"hold_estimate": estimate})
    reference = "control" if with_control else "baseline"
    return with_extra_results(analysis, gauge_results(rollout.analysis.metrics, gauges, reference, percent))
