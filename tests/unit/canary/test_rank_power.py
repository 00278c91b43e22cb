"""The power statement of a window (``canary.rank_power``): Noether's formula against the rank test it describes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from specguard.canary.judge.histogram_tests import binned_shift_superiority
from specguard.canary.judge.policy import analysis_policy
from specguard.canary.judge.rank_power import rank_test_power, scale_for_power, shifted_superiority
from specguard.canary.judge.window import (
    AnalysisPolicy,
    MetricRule,
    RequestSample,
    SegmentSamples,
    analyse_window,
    hold_estimate,
    look_alpha,
    why_inconclusive,
)
from specguard.canary.spec.rollout import load_rollout
from specguard.errors import InputFileError
from specguard.server_metrics.histograms import Histogram
from tests.canary_harness import MINIMAL_ROLLOUT


def test_shifted_superiority_counts_every_ordered_pair_once_ties_half() -> None:
    # The 6 ordered pairs (x, y) of [1, 2, 3] with 1.5 x > y, by hand: x = 2 beats 1 and ties 3 (half), x = 3 beats
    # 1 and 2, x = 1 beats none: 3.5 of 6.
    assert shifted_superiority([1.0, 2.0, 3.0], 1.5, 1.0) == pytest.approx(3.5 / 6)
    # Lower-is-worse: P(1.5 x < y): 1.5 < 2, 1.5 < 3, 3 = 3 tie (half): 2.5 of 6.
    assert shifted_superiority([1.0, 2.0, 3.0], 1.5, -1.0) == pytest.approx(2.5 / 6)
    assert shifted_superiority([5.0] * 10, 1.1, 1.0) == 1.0  # deterministic servers: every shifted value is worse
    assert shifted_superiority([5.0], 1.1, 1.0) is None


def test_noethers_power_matches_the_rank_tests_rejection_rate_by_simulation() -> None:
    """Lognormal values (sigma 0.27), candidate 1.1x: the one-sided Mann-Whitney test's rejection rate over 400 draws
    at Pocock's first-look threshold agrees with the formula within 3 binomial standard deviations."""
    rng = np.random.default_rng(7)
    threshold = look_alpha(1, 0.05, 60, "pocock")
    p_worse = float(stats.norm.cdf(np.log(1.1) / (0.27 * np.sqrt(2))))
    for n in (100, 250):
        rejected = 0
        for _ in range(400):
            base, cand = rng.lognormal(0, 0.27, n), 1.1 * rng.lognormal(0, 0.27, n)
            rejected += stats.mannwhitneyu(cand, base, alternative="greater").pvalue < threshold
        predicted = rank_test_power(p_worse, n, n, threshold)
        sd = np.sqrt(predicted * (1 - predicted) / 400)
        assert abs(rejected / 400 - predicted) <= 3 * sd + 0.01, (n, rejected, predicted)
    # and the scale it names reaches the target: 100 per pool needs about 2.5x
    scale = scale_for_power(p_worse, 100, 100, threshold, 0.8)
    assert scale is not None and rank_test_power(p_worse, round(100 * scale), round(100 * scale), threshold) >= 0.79
    assert scale_for_power(0.5, 100, 100, threshold, 0.8) is None  # a test that cannot tell the shift: no size will


def _requests(values: list[float], metric: str = "e2e_ms") -> list[RequestSample]:
    return [RequestSample.model_construct(in_flight=0, ok=True, values={metric: [v]}) for v in values]


def test_a_p99_without_its_tail_is_judged_at_p90_and_says_so() -> None:
    """100 requests hold one beyond their P99 (the tail rule wants 5, so 500 requests): the ratio is taken at P90."""
    rng = np.random.default_rng(3)
    policy = AnalysisPolicy(metrics=[MetricRule(metric="e2e_ms")], max_error_rate_increase=None, resamples=100)
    seg = SegmentSamples.model_construct(
        baseline=_requests(list(rng.lognormal(5, 0.05, 100))),
        candidate=_requests(list(rng.lognormal(5, 0.05, 100))),
        control=_requests(list(rng.lognormal(5, 0.05, 100))),
    )
    result = analyse_window(policy, {"all": seg}, 1).results[0]
    assert result.percentile == 0.9
    assert "judged at p90 (p99 needs 500 observations)" in result.text


def test_a_window_too_small_to_judge_says_how_long_a_judged_one_would_take() -> None:
    rng = np.random.default_rng(4)
    policy = AnalysisPolicy(metrics=[MetricRule(metric="e2e_ms")], max_error_rate_increase=None, resamples=100)
    seg = SegmentSamples.model_construct(
        baseline=_requests(list(rng.lognormal(5, 0.3, 400))), candidate=_requests(list(rng.lognormal(5, 0.3, 10))), control=None
    )
    analysis = analyse_window(policy, {"all": seg}, 1)
    assert analysis.verdict == "INCONCLUSIVE" and analysis.results[0].scale_needed == pytest.approx(50 / 10)
    estimate = hold_estimate(analysis, window_s=30.0, percent=5.0)
    assert estimate.startswith("at 5 % on this traffic a judged window needs about 150 s")
    assert estimate in why_inconclusive(analysis.model_copy(update={"hold_estimate": estimate}))


def test_the_rollout_file_sets_the_power_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_TOKEN", "t" * 32)
    path = tmp_path / "rollout.yaml"
    path.write_text(MINIMAL_ROLLOUT + "analysis:\n  min_power: 0.9\n  min_stratum_samples: 3\n")
    policy = analysis_policy(load_rollout(path))
    assert policy.min_power == 0.9 and policy.min_stratum_samples == 3
    path.write_text(MINIMAL_ROLLOUT + "analysis:\n  min_power: 1.5\n")
    with pytest.raises(InputFileError, match="min_power"):
        load_rollout(path)


def _histogram(values: np.ndarray, bounds: list[float]) -> Histogram:
    cumulative = [float(np.sum(values <= b)) for b in bounds]
    return Histogram(bounds=bounds, cumulative=cumulative, sum=float(values.sum()), count=float(len(values)))


def test_the_bucket_tests_shift_superiority_matches_the_continuous_one_on_fine_buckets_and_shrinks_on_coarse() -> None:
    rng = np.random.default_rng(5)
    values = rng.lognormal(np.log(0.02), 0.27, 20000)
    continuous = float(stats.norm.cdf(np.log(1.1) / (0.27 * np.sqrt(2))))  # 0.598
    fine = [0.02 * 1.01**k for k in range(-120, 121)] + [math.inf]
    coarse = [0.005, 0.01, 0.02, 0.04, 0.08, math.inf]  # doubling buckets, as vLLM's ITL histogram roughly has
    p_fine = binned_shift_superiority(_histogram(values, fine), 1.1, 1.0)
    p_coarse = binned_shift_superiority(_histogram(values, coarse), 1.1, 1.0)
    assert p_fine is not None and abs(p_fine - continuous) < 0.01, (p_fine, continuous)
    # Binning hides part of the shift (two values in one bucket tie): the bucket test sees less, and says so.
    assert p_coarse is not None and 0.5 < p_coarse < p_fine
    assert binned_shift_superiority(_histogram(values, fine), 1.1, -1.0) == pytest.approx(1 - p_fine, abs=0.01)
