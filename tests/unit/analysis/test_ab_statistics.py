"""The comparison statistics against known distributions."""

import numpy as np
import pytest

from specguard.analysis.ab_statistics import (
    compare_percentile,
    min_samples,
    weighted_percentile_rows,
)


def per_request(values):
    return [[float(v)] for v in values]


def test_weighted_percentile_equals_numpy_on_the_multiset():
    rng = np.random.default_rng(0)
    values = np.sort(rng.normal(size=37))
    weights = rng.integers(0, 4, size=(50, 37))
    weights[:, 0] += 1  # no empty row
    got = weighted_percentile_rows(values, weights, 0.95)
    for row, w in zip(got, weights):
        assert row == pytest.approx(np.percentile(np.repeat(values, w), 95))


@pytest.mark.parametrize("q", [0.5, 0.95])
@pytest.mark.slow  # 11.6 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_ratio_interval_covers_the_truth_about_95_percent_of_the_time(q):
    """Lognormal latencies; the candidate is the baseline scaled by 0.8, so the true ratio is 0.8 at every q."""
    hits = 0
    trials = 120
    for seed in range(trials):
        rng = np.random.default_rng(1000 + seed)
        base = rng.lognormal(3.0, 0.5, size=300)
        cand = 0.8 * rng.lognormal(3.0, 0.5, size=300)
        est = compare_percentile([per_request(base)], [per_request(cand)], q, resamples=600, seed=seed)
        hits += est.ci_low <= 0.8 <= est.ci_high
    coverage = hits / trials
    assert 0.88 <= coverage <= 0.995, coverage


def test_per_token_values_are_resampled_by_request():
    """Tokens of one request share a request-level offset: a token-level bootstrap would be far too narrow."""
    rng = np.random.default_rng(3)

    def arm(scale):
        return [[list(scale * (rng.lognormal(2, 0.6) + rng.normal(0, 0.05, size=50).clip(-0.5))) for _ in range(80)]]

    est = compare_percentile(arm(1.0), arm(1.0), 0.5, resamples=800, seed=1)
    naive_width = 2 * 1.96 * 0.6 / np.sqrt(80 * 50)  # rough token-level width on the log scale
    assert np.log(est.ci_high) - np.log(est.ci_low) > 3 * naive_width
    assert est.ci_low < 1.0 < est.ci_high


def test_clear_improvement_excludes_one_and_the_rank_test_agrees():
    rng = np.random.default_rng(7)
    base = rng.lognormal(3, 0.3, size=400)
    cand = 0.7 * rng.lognormal(3, 0.3, size=400)
    est = compare_percentile([per_request(base)], [per_request(cand)], 0.95, seed=2)
    assert est.ci_high < 1.0 and est.ratio == pytest.approx(np.percentile(cand, 95) / np.percentile(base, 95))
    assert est.mann_whitney_p < 1e-6 and est.prob_candidate_lower > 0.8
    assert est.enough_samples


def test_too_few_samples_say_how_many_more():
    rng = np.random.default_rng(8)
    est = compare_percentile([per_request(rng.lognormal(3, 0.5, 30))], [per_request(rng.lognormal(3, 0.5, 30))], 0.99)
    assert not est.enough_samples
    assert est.more_requests_needed >= min_samples(0.99) - 30
    assert min_samples(0.99) == 500 and min_samples(0.95) == 100 and min_samples(0.5) == 10


def test_more_requests_are_sized_for_the_target_change():
    """Past the tail rule, the advice narrows the interval to the change that counts: half the change, 4x the requests."""
    rng = np.random.default_rng(8)
    base, cand = [per_request(rng.lognormal(3, 0.5, 300))], [per_request(rng.lognormal(3, 0.5, 300))]
    need = {t: compare_percentile(base, cand, 0.5, target_change=t).more_requests_needed for t in (0.02, 0.04, 0.5)}
    assert need[0.02] > need[0.04] > 0 and need[0.5] == 0
    assert (need[0.02] + 300) / (need[0.04] + 300) == pytest.approx((np.log(1.04) / np.log(1.02)) ** 2, rel=0.02)
    # a zero target sizes for the default change instead of dividing by zero
    zero = compare_percentile(base, cand, 0.5, target_change=0.0).more_requests_needed
    assert zero == compare_percentile(base, cand, 0.5).more_requests_needed


def test_disagreeing_repetitions_widen_the_interval():
    rng = np.random.default_rng(9)
    # each candidate repetition has its own level (e.g. a noisy neighbour in one block)
    base = [per_request(rng.lognormal(3, 0.2, 200)) for _ in range(3)]
    cand = [per_request(level * rng.lognormal(3, 0.2, 200)) for level in (0.7, 1.0, 1.3)]
    est = compare_percentile(base, cand, 0.5, seed=4)
    assert est.repetition_spread_widened
    assert est.ci_low < 0.75 and est.ci_high > 1.2
    steady = [per_request(rng.lognormal(3, 0.2, 200)) for _ in range(3)]
    assert not compare_percentile(base, steady, 0.5, seed=4).repetition_spread_widened


@pytest.mark.slow  # 6.0 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_homogeneous_repetitions_rarely_look_heterogeneous():
    widened = 0
    trials = 60
    for seed in range(trials):
        rng = np.random.default_rng(500 + seed)
        base = [per_request(rng.lognormal(3, 0.4, 150)) for _ in range(3)]
        cand = [per_request(rng.lognormal(3, 0.4, 150)) for _ in range(3)]
        widened += compare_percentile(base, cand, 0.5, resamples=400, seed=seed).repetition_spread_widened
    assert widened / trials < 0.15, widened


def test_each_arm_gets_its_own_interval_covering_its_estimate():
    rng = np.random.default_rng(11)
    base = rng.lognormal(3, 0.5, 400)
    est = compare_percentile([per_request(base)], [per_request(0.9 * rng.lognormal(3, 0.5, 400))], 0.95, seed=3)
    assert est.baseline_ci[0] <= est.baseline <= est.baseline_ci[1]
    assert est.candidate_ci[0] <= est.candidate <= est.candidate_ci[1]
    assert est.baseline_ci[0] <= np.exp(3 + 0.5 * 1.6449) <= est.baseline_ci[1]  # the true lognormal p95


def test_two_repetitions_never_widen_three_do():
    """One degree of freedom makes a between-repetition t-interval useless: widening needs three repetitions."""
    rng = np.random.default_rng(9)
    base = [per_request(rng.lognormal(3, 0.2, 200)) for _ in range(3)]
    cand = [per_request(level * rng.lognormal(3, 0.2, 200)) for level in (0.7, 1.3, 1.0)]
    assert compare_percentile(base, cand, 0.5, seed=4).repetition_spread_widened
    assert not compare_percentile(base[:2], cand[:2], 0.5, seed=4).repetition_spread_widened
