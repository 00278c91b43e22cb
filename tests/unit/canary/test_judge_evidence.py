"""Issue 26: the judge never passes a window on no evidence, counts the matched sample, spends looks only on
judged windows, and compares the gauges with the pool the latency is compared with."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specguard.canary.judge.decision import RolloutRule, StepProgress, StepRule, WindowRecord, decide
from specguard.canary.judge.policy import analysis_policy, gauge_results
from specguard.canary.judge.window import (
    AnalysisPolicy,
    MetricRule,
    RequestSample,
    SegmentSamples,
    analyse_window,
    look_alpha,
    spends_look,
    why_inconclusive,
    with_extra_results,
)
from specguard.canary.spec.rollout import Analysis, MetricBudget, load_rollout

ROOT = Path(__file__).resolve().parents[3]

POLICY = AnalysisPolicy(metrics=[MetricRule(metric="itl_ms")], max_error_rate_increase=None, resamples=200)
GAUGES = [MetricBudget(metric="requests_waiting", budget=2.0), MetricBudget(metric="kv_cache_usage", budget=0.1)]
EQUAL = {
    "baseline": {"requests_waiting": 1.0, "kv_cache_usage": 0.3},
    "candidate": {"requests_waiting": 1.0, "kv_cache_usage": 0.3},
}


def requests(rng: np.random.Generator, n: int, in_flight: int, level_ms: float) -> list[RequestSample]:
    itl = rng.lognormal(np.log(level_ms), 0.3, size=(n, 8))
    return [RequestSample.model_construct(in_flight=in_flight, ok=True, values={"itl_ms": row.tolist()}) for row in itl]


def test_an_empty_window_with_passing_gauges_is_inconclusive_and_never_promotes() -> None:
    # 0.2 requests/s with min_requests 0: the evidence rule is the only guard (before: PASS, promoted on 7 requests).
    empty = with_extra_results(analyse_window(POLICY, {}, 1), gauge_results(GAUGES, EQUAL))
    assert [r.verdict for r in empty.results] == ["PASS", "PASS"]
    assert empty.verdict == "INCONCLUSIVE"
    assert not spends_look(empty)
    rule = RolloutRule(
        steps=[StepRule(percent=5, min_seconds=0, min_requests=0), StepRule(percent=100, min_seconds=0, min_requests=0)]
    )
    windows = [WindowRecord(step=0, verdict=empty.verdict)] * 6
    assert decide(rule, StepProgress(step=0, seconds_in_step=600, requests_in_step=7), windows).kind == "hold"


def test_too_few_requests_in_one_pool_is_inconclusive_whatever_the_gauges_say() -> None:
    rng = np.random.default_rng(1)
    few = {
        "all": SegmentSamples.model_construct(baseline=requests(rng, 200, 0, 20), candidate=requests(rng, 7, 0, 20), control=None)
    }
    a = with_extra_results(analyse_window(POLICY, few, 1), gauge_results(GAUGES, EQUAL))
    assert a.verdict == "INCONCLUSIVE"


def test_min_samples_counts_the_matched_subsample_not_the_pools() -> None:
    # 200 baseline requests, of which 10 share the candidate's in-flight stratum; the candidate 12.9x slower there.
    rng = np.random.default_rng(2)
    base = requests(rng, 200, 0, 20) + requests(rng, 10, 4, 20)
    cand = requests(rng, 60, 4, 20 * 12.9)
    a = analyse_window(POLICY, {"all": SegmentSamples.model_construct(baseline=base, candidate=cand, control=None)}, 1)
    (r,) = a.results
    assert r.verdict == "INCONCLUSIVE" and a.verdict == "INCONCLUSIVE"
    assert (r.n_baseline, r.n_candidate) == (10, 60), "the counts are those of the matched comparison"
    assert "matched" in r.text and "fewer than 50" in r.text
    # With 60 baseline requests in that stratum the same candidate is judged (and fails).
    base = requests(rng, 200, 0, 20) + requests(rng, 60, 4, 20)
    judged = analyse_window(POLICY, {"all": SegmentSamples.model_construct(baseline=base, candidate=cand, control=None)}, 1)
    assert judged.verdict == "FAIL" and spends_look(judged)


def test_looks_past_the_plan_are_never_judged_at_zero_and_say_so() -> None:
    rng = np.random.default_rng(3)
    arms = {
        "all": SegmentSamples.model_construct(
            baseline=requests(rng, 100, 0, 20), candidate=requests(rng, 100, 0, 20 * 3), control=None
        )
    }
    late = analyse_window(POLICY.model_copy(update={"max_looks": 4}), arms, 6)
    assert late.alpha_look == look_alpha(4, POLICY.alpha, 4, "pocock") / 6 > 0
    assert late.verdict == "FAIL", "a 3x regression still fails past the plan"
    assert any("past the 4 planned looks" in w for w in late.warnings)


def test_gauges_compare_with_the_control_pool_and_not_at_full_weight() -> None:
    gauges = {
        "baseline": {"requests_waiting": 0.0, "kv_cache_usage": 0.0},  # idle baseline
        "control": {"requests_waiting": 3.0, "kv_cache_usage": 0.4},
        "candidate": {"requests_waiting": 3.5, "kv_cache_usage": 0.42},
    }
    against_control = gauge_results(GAUGES, gauges, "control", 25)
    assert [r.verdict for r in against_control] == ["PASS", "PASS"]
    assert "vs control" in against_control[0].text
    assert [r.verdict for r in gauge_results(GAUGES, gauges, "baseline", 25)] == ["FAIL", "FAIL"]
    assert gauge_results(GAUGES, gauges, "baseline", 100) == [], "at 100 % the idle baseline is no reference"


def test_the_hold_names_the_true_cause_and_min_stratum_samples_is_read() -> None:
    # Hundreds of requests whose in-flight strata do not overlap: the hold says so, not "too little traffic".
    rng = np.random.default_rng(4)
    arms = {
        "all": SegmentSamples.model_construct(
            baseline=requests(rng, 300, 200, 20), candidate=requests(rng, 80, 0, 20), control=None
        )
    }
    a = analyse_window(POLICY, arms, 1)
    assert a.verdict == "INCONCLUSIVE"
    why = why_inconclusive(a)
    assert "no in-flight stratum holds 5 requests of each pool" in why
    rule = RolloutRule(steps=[StepRule(percent=5, min_seconds=0, min_requests=0), StepRule(percent=100)])
    held = decide(
        rule,
        StepProgress(step=0, seconds_in_step=60, requests_in_step=80),
        [WindowRecord(step=0, verdict="INCONCLUSIVE", why_inconclusive=why)],
    )
    assert any("no in-flight stratum" in r.text and "too little traffic" not in r.text for r in held.reasons)
    assert why_inconclusive(analyse_window(POLICY, {}, 1)) == "no request in this window"
    rollout = load_rollout(ROOT / "examples" / "rollout-embedded.yaml")
    assert analysis_policy(rollout).min_stratum_samples == 5
    tuned = rollout.model_copy(update={"analysis": rollout.analysis.model_copy(update={"min_stratum_samples": 2})})
    assert analysis_policy(tuned).min_stratum_samples == 2
    assert Analysis.model_validate({"min_stratum_samples": 2}).min_stratum_samples == 2


def test_strata_that_do_not_overlap_at_small_weights_are_pooled_into_coarser_bands() -> None:
    # At 5 % on two replicas per pool the candidate's replicas run at 2-3 in flight, the baseline's at 4-7: the
    # power-of-two bins {2-3} and {4-7} never overlap (59 windows held so); the band {2-7} holds both.
    rng = np.random.default_rng(6)
    base = requests(rng, 300, 6, 20)
    cand = requests(rng, 80, 2, 20 * 3)
    a = analyse_window(POLICY, {"all": SegmentSamples.model_construct(baseline=base, candidate=cand, control=None)}, 1)
    (r,) = a.results
    assert r.verdict == "FAIL" and (r.n_baseline, r.n_candidate) == (300, 80)
