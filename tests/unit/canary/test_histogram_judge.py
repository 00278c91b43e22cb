"""The histogram judge on synthetic windows: known draws binned into vLLM's own bucket bounds, read cumulatively.

Bucket bounds: vLLM 0.32.0's, ``specguard.scripted.vllm_buckets`` (copied from its source, where it says).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats

from specguard.canary.judge.decision import RolloutRule, StepProgress, WindowRecord, decide
from specguard.canary.judge.histogram_judge import (
    METHOD,
    STEP_POINTS,
    WINDOW_DISTRIBUTION,
    SegmentHistograms,
    judge_histogram_window,
)
from specguard.canary.judge.histogram_tests import bucket_rank_test, pool_deltas
from specguard.canary.judge.window import AnalysisPolicy, MetricRule, look_alpha
from specguard.canary.spec.rollout import MetricBudget
from specguard.scripted.vllm_buckets import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS
from specguard.server_metrics.histograms import Histogram, merge_histograms

SHAPES = {"itl": (ITL_BUCKETS, 0.03, 0.4), "ttft": (TTFT_BUCKETS, 0.2, 0.5), "e2e": (E2E_BUCKETS, 2.0, 0.3)}
METRIC_KEY = {"itl": "itl_ms", "ttft": "ttft_ms", "e2e": "e2e_ms"}
STEPS = 12


def cumulative_reads(step_draws: Sequence[np.ndarray], buckets: Sequence[float], start: Sequence[float] = ()) -> list[Histogram]:
    """One server's cumulative reads: before the window, then after each step's draws (le: x <= bound)."""
    bounds = [*buckets, math.inf]
    counts = np.zeros(len(bounds)) if not start else np.diff(np.asarray(start, dtype=float), prepend=0.0)
    total = float(counts.sum())
    reads = [Histogram(bounds=bounds, cumulative=np.cumsum(counts).tolist(), sum=0.0, count=total)]
    observed_sum = 0.0
    for x in step_draws:
        counts = counts + np.bincount(np.searchsorted(buckets, x, side="left"), minlength=len(bounds))
        observed_sum += float(x.sum())
        reads.append(Histogram(bounds=bounds, cumulative=np.cumsum(counts).tolist(), sum=observed_sum, count=float(counts.sum())))
    return reads


def pool(
    rng: np.random.Generator, name: str, servers: int, per_step: int, slower: float = 1.0, steps: int = STEPS
) -> list[list[Histogram]]:
    buckets, median, sigma = SHAPES[name]
    return [
        cumulative_reads([slower * rng.lognormal(math.log(median), sigma, per_step) for _ in range(steps)], buckets)
        for _ in range(servers)
    ]


def window(
    rng: np.random.Generator, name: str, slower: float, steps: int = STEPS, candidate_per_step: int = 800
) -> SegmentHistograms:
    # The baseline's two servers and the candidate's one see different loads: the pools' sizes differ, as at a small weight.
    return SegmentHistograms(
        baseline={name: pool(rng, name, 2, 600, steps=steps)},
        candidate={name: pool(rng, name, 1, candidate_per_step, slower, steps)},
    )


def policy(metric: str, budget: float = 0.10, alpha: float = 0.05, max_looks: int = 10) -> AnalysisPolicy:
    return AnalysisPolicy(
        metrics=[MetricRule(metric=metric, budget=budget)],
        max_error_rate_increase=None,
        alpha=alpha,
        max_looks=max_looks,
        resamples=100,
    )


@pytest.mark.slow  # 10.4 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_equal_pools_fail_no_more_often_than_the_looks_alpha():
    # Budget 0 and one look spending alpha = 0.2: the least protected setting (any ratio above 1 passes the
    # gate), where a miscalibrated test shows in 200 windows. A budget above 0 only makes FAIL harder.
    windows, alpha = 200, 0.2
    p = policy("itl_ms", budget=0.0, alpha=alpha, max_looks=1)
    fails = window_rejections = 0
    for w in range(windows):
        seg = window(np.random.default_rng(w), "itl", 1.0)
        result = judge_histogram_window(p, {"all": seg}, 1, seed=w).results[0]
        assert result.verdict != "INCONCLUSIVE" and result.test == "step points + window distribution"
        fails += result.verdict == "FAIL"
        base, cand = pool_deltas(seg.baseline["itl"]).window, pool_deltas(seg.candidate["itl"]).window
        assert base is not None and cand is not None
        pw = bucket_rank_test(base, cand, 1.0)
        window_rejections += pw is not None and pw < alpha
    bound = stats.binom.ppf(0.999, windows, alpha)
    assert fails <= bound
    assert window_rejections <= bound  # the bucket test alone holds its level on independent draws


@pytest.mark.parametrize("name", ["ttft", "e2e"])
def test_equal_pools_on_the_request_histograms_do_not_fail(name: str):
    p = policy(METRIC_KEY[name])
    threshold = look_alpha(1, p.alpha, p.max_looks, p.spending)
    verdicts = [
        judge_histogram_window(p, {"all": window(np.random.default_rng(w), name, 1.0)}, 1, seed=w).verdict for w in range(20)
    ]
    assert verdicts.count("FAIL") <= stats.binom.ppf(0.999, len(verdicts), threshold)
    assert "INCONCLUSIVE" not in verdicts


def test_a_candidate_30_percent_slower_at_p99_fails_and_rolls_back():
    p = policy("itl_ms")
    analyses = [judge_histogram_window(p, {"all": window(np.random.default_rng(w), "itl", 1.3)}, 1, seed=w) for w in range(5)]
    assert [a.verdict for a in analyses] == ["FAIL"] * 5
    result = analyses[0].results[0]
    assert result.ratio is not None and result.ratio.ratio > 1 + result.budget
    assert result.p_value is not None and result.p_value < result.threshold
    assert "server-side histograms" in result.text and result.test == "step points + window distribution"
    records = [
        WindowRecord(step=0, verdict=a.verdict, failures=[r for r in a.results if r.verdict == "FAIL"]) for a in analyses[:2]
    ]
    decision = decide(RolloutRule(windows_to_rollback=2), StepProgress(step=0, seconds_in_step=120, requests_in_step=10), records)
    assert decision.kind == "rollback"


@pytest.mark.parametrize("name", ["itl", "ttft", "e2e"])
def test_a_candidate_5_percent_slower_under_a_10_percent_budget_passes(name: str):
    p = policy(METRIC_KEY[name], budget=0.10)
    verdicts = [
        judge_histogram_window(p, {"all": window(np.random.default_rng(w), name, 1.05)}, 1, seed=w).verdict for w in range(5)
    ]
    assert verdicts == ["PASS"] * 5


def test_the_window_says_its_source_and_tests():
    a = judge_histogram_window(policy("itl_ms"), {"all": window(np.random.default_rng(1), "itl", 1.0)}, 1)
    assert a.source == "server_histograms" and a.method == METHOD
    assert STEP_POINTS in a.method and WINDOW_DISTRIBUTION in a.method and "server-side histograms" in a.method
    assert any("per step, not per token" in w for w in a.warnings)  # server-side ITL under speculation


def test_too_few_steps_for_the_step_test_use_the_window_distribution_alone():
    p = policy("itl_ms")
    a = judge_histogram_window(p, {"all": window(np.random.default_rng(3), "itl", 1.3, steps=2, candidate_per_step=6000)}, 1)
    assert a.results[0].test == "window distribution only" and a.verdict == "FAIL"
    assert "too few to reject" in a.results[0].text


def test_too_few_observations_are_inconclusive_not_a_fail():
    p = policy("itl_ms")
    rng = np.random.default_rng(4)
    seg = SegmentHistograms(
        baseline={"itl": pool(rng, "itl", 2, 600)},
        candidate={"itl": pool(rng, "itl", 1, 3, slower=2.0)},  # 36 observations, twice as slow
    )
    a = judge_histogram_window(p, {"all": seg}, 1)
    assert a.verdict == "INCONCLUSIVE" and a.results[0].n_candidate == 3 * STEPS
    assert "fewer than" in a.results[0].text


def test_a_restart_is_reported_not_judged_even_when_the_pools_sum_still_grows():
    rng = np.random.default_rng(5)
    buckets, median, sigma = SHAPES["itl"]
    steady = pool(rng, "itl", 1, 2000, slower=1.3)[0]
    # A small server that had 50 observations before the window restarts after its third step.
    before = cumulative_reads([rng.lognormal(math.log(median), sigma, 50)], buckets)[-1].cumulative
    small = cumulative_reads([rng.lognormal(math.log(median), sigma, 5) for _ in range(3)], buckets, start=before)
    small += cumulative_reads([rng.lognormal(math.log(median), sigma, 5) for _ in range(STEPS - 3)], buckets)[1:]
    merged = [merge_histograms([a, b]) for a, b in zip(steady, small, strict=True)]
    assert all(x is not None and y is not None and y.count >= x.count for x, y in zip(merged, merged[1:]))
    seg = SegmentHistograms(baseline={"itl": pool(rng, "itl", 2, 600)}, candidate={"itl": [steady, small]})
    a = judge_histogram_window(policy("itl_ms"), {"all": seg}, 1)
    assert a.verdict == "INCONCLUSIVE"
    assert "server 1: counts fell between reads 3 and 4 (a restart)" in a.results[0].text
    assert any("a restart" in w for w in a.warnings)


def test_a_control_pool_is_the_reference_when_given():
    rng = np.random.default_rng(6)
    # The baseline is loaded and slower; the control carries the candidate's share, as the candidate does.
    seg = SegmentHistograms(
        baseline={"itl": pool(rng, "itl", 2, 600, slower=1.3)},
        candidate={"itl": pool(rng, "itl", 1, 800)},
        control={"itl": pool(rng, "itl", 1, 800)},
    )
    a = judge_histogram_window(policy("itl_ms"), {"all": seg}, 1)
    assert a.comparison == "control" and a.verdict == "PASS"
    slower = seg.model_copy(update={"candidate": {"itl": pool(rng, "itl", 1, 800, slower=1.3)}})
    b = judge_histogram_window(policy("itl_ms"), {"all": slower}, 1)
    assert b.comparison == "control" and b.verdict == "FAIL"


def test_the_engines_5xx_counts_judge_the_error_rate():
    p = policy("itl_ms").model_copy(update={"max_error_rate_increase": 0.005})
    seg = {"all": window(np.random.default_rng(7), "itl", 1.0)}
    bad = judge_histogram_window(p, seg, 1, errors={"baseline": (10, 20_000), "candidate": (150, 2_000)})
    err = next(r for r in bad.results if r.metric == "error_rate")
    assert err.verdict == "FAIL" and bad.verdict == "FAIL" and "5xx" in err.text
    same = judge_histogram_window(p, seg, 1, errors={"baseline": (10, 20_000), "candidate": (1, 2_000)})
    assert next(r for r in same.results if r.metric == "error_rate").verdict == "PASS"
    none = judge_histogram_window(p, seg, 1)
    assert all(r.metric != "error_rate" for r in none.results)
    assert any("error rate not judged" in w for w in none.warnings)


def test_the_pool_gauges_are_judged_by_their_margins():
    seg = {"all": window(np.random.default_rng(8), "itl", 1.0)}
    budgets = [MetricBudget(metric="requests_waiting", budget=2.0)]
    gauges = {"baseline": {"requests_waiting": 1.0}, "candidate": {"requests_waiting": 6.0}}
    a = judge_histogram_window(policy("itl_ms"), seg, 1, gauge_budgets=budgets, gauges=gauges)
    gauge = next(r for r in a.results if r.metric == "requests_waiting")
    assert gauge.verdict == "FAIL" and a.verdict == "FAIL"
