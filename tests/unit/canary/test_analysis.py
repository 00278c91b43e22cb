"""The window analysis on synthetic pools: lognormal latencies that grow with the in-flight count at send time."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from specguard.canary.judge.window import (
    AnalysisPolicy,
    MetricRule,
    RequestSample,
    SegmentSamples,
    analyse_window,
    common_strata,
    look_alpha,
    matched_baseline,
    spent_alpha,
    stratum,
    van_elteren_worse,
)

BASE_ITL_MS = 20.0
LOAD_SLOPE = 0.05  # each request in flight on the replica adds 5 % to every latency: load-dependent latency


def pool(
    rng: np.random.Generator,
    n: int,
    *,
    slowdown: float = 1.0,
    in_flight: tuple[int, int] = (0, 16),
    tokens: int = 8,
    error_rate: float = 0.0,
    drift: float = 1.0,
) -> list[RequestSample]:
    """``n`` requests: in-flight uniform on [lo, hi), a lognormal request level, lognormal per-token ITL around it.

    ``slowdown`` is the candidate's own regression at equal load; ``drift`` a window-wide factor both pools share
    (traffic mix, host noise). Each request carries per-token ITL and a single E2E value.
    """
    flights = rng.integers(in_flight[0], in_flight[1], size=n)
    level = BASE_ITL_MS * slowdown * drift * (1 + LOAD_SLOPE * flights) * rng.lognormal(0.0, 0.25, size=n)
    itl = rng.lognormal(np.log(level)[:, None], 0.3, size=(n, tokens))
    ok = rng.random(n) >= error_rate
    return [
        RequestSample.model_construct(
            in_flight=int(f), ok=bool(o), values={"itl_ms": row.tolist(), "e2e_ms": [float(row.sum())]} if o else {}
        )
        for f, row, o in zip(flights, itl, ok)
    ]


ITL_ONLY = AnalysisPolicy(metrics=[MetricRule(metric="itl_ms")], max_error_rate_increase=None, resamples=200)


def one_segment(base: list[RequestSample], cand: list[RequestSample], control: list[RequestSample] | None = None):
    return {"all": SegmentSamples.model_construct(baseline=base, candidate=cand, control=control)}


# ---- error control ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("spending", ["pocock", "obrien_fleming"])
@pytest.mark.slow  # 11.1 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_the_looks_spend_exactly_alpha_over_the_planned_looks(spending):
    per_look = [look_alpha(k, 0.05, 30, spending) for k in range(1, 31)]
    assert math.isclose(sum(per_look), 0.05, rel_tol=1e-9)
    assert all(a > 0 for a in per_look)
    # Past the plan (issue 26): never 0; the tail alpha_K / (j (j+1)) sums to alpha_K (telescoping), so
    # 10,000 extra looks add less than alpha_K to the rollout's bound.
    tail = [look_alpha(30 + j, 0.05, 30, spending) for j in range(1, 10_001)]
    assert all(a > 0 for a in tail)
    assert tail[0] == pytest.approx(per_look[-1] / 2)
    assert sum(tail) < per_look[-1]
    assert sum(tail) == pytest.approx(per_look[-1] * (1 - 1 / 10_001))


def test_pocock_spends_early_and_obrien_fleming_late():
    assert look_alpha(1, 0.05, 30, "pocock") > 0.05 / 30 * 1.5  # front-loaded: a regression early is caught early
    assert look_alpha(1, 0.05, 30, "obrien_fleming") < 1e-10
    assert spent_alpha(0.5, 0.05, "obrien_fleming") < spent_alpha(0.5, 0.05, "pocock")


def test_a_look_before_the_first_is_refused():
    with pytest.raises(ValueError, match="from 1"):
        look_alpha(0, 0.05, 30, "pocock")


def test_the_window_states_its_error_control_and_splits_the_look_over_its_tests():
    rng = np.random.default_rng(0)
    policy = AnalysisPolicy(resamples=100)  # 3 latency metrics + error rate, two segments: 8 tests
    segs = {s: SegmentSamples.model_construct(baseline=pool(rng, 80), candidate=pool(rng, 80), control=None) for s in "ab"}
    w = analyse_window(policy, segs, look=3)
    assert w.alpha_look == pytest.approx(look_alpha(3, 0.05, 60, "pocock"))
    assert len(w.results) == 8
    assert all(r.threshold == pytest.approx(w.alpha_look / 8) for r in w.results)
    assert "alpha = 0.05 over 60 looks" in w.error_control and "Pocock" in w.error_control


# ---- strata ----------------------------------------------------------------------------------------------


def test_strata_are_power_of_two_bins_of_the_in_flight_count():
    assert [stratum(n) for n in (0, 1, 2, 3, 4, 7, 8, 100)] == [0, 1, 2, 2, 3, 3, 4, 7]


def test_the_matched_baseline_takes_the_candidates_stratum_mix():
    rng = np.random.default_rng(1)
    base = pool(rng, 2000, in_flight=(0, 16))
    cand = pool(rng, 100, in_flight=(0, 2))  # strata 0 and 1 only, about half each
    strata = common_strata(base, cand, 5)
    assert strata == [0, 1]
    b, c = matched_baseline(base, cand, strata, rng)
    share_c = sum(s.in_flight == 0 for s in c) / len(c)
    share_b = sum(s.in_flight == 0 for s in b) / len(b)
    assert abs(share_b - share_c) < 0.02
    assert {stratum(s.in_flight) for s in b} == {0, 1}


def test_van_elteren_sees_a_shift_within_strata_and_its_direction():
    rng = np.random.default_rng(2)
    pairs = [(rng.normal(k, 1, 50).tolist(), rng.normal(k + 0.8, 1, 20).tolist()) for k in range(3)]
    p = van_elteren_worse(pairs, 1.0)
    assert p is not None and p < 1e-4
    assert van_elteren_worse(pairs, -1.0) > 0.99  # "the candidate is lower" is not supported


# ---- verdicts ----------------------------------------------------------------------------------------------


def test_a_20_percent_itl_regression_at_equal_load_fails():
    rng = np.random.default_rng(3)
    w = analyse_window(ITL_ONLY, one_segment(pool(rng, 400), pool(rng, 400, slowdown=1.2)), look=1)
    assert w.verdict == "FAIL", [r.text for r in w.results]
    (r,) = w.results
    assert r.ratio is not None and r.ratio.ci_low > 1.0
    assert r.p_value is not None and r.p_value < r.threshold


def test_equal_pools_pass():
    rng = np.random.default_rng(4)
    w = analyse_window(ITL_ONLY, one_segment(pool(rng, 400), pool(rng, 400)), look=1)
    assert w.verdict == "PASS", [r.text for r in w.results]
    assert w.comparison == "stratified" and not w.warnings


def test_the_effect_size_gate_passes_a_significant_change_within_budget():
    rng = np.random.default_rng(5)
    segs = one_segment(pool(rng, 3000), pool(rng, 3000, slowdown=1.05))  # 5 % slower: significant, within 10 %
    w = analyse_window(ITL_ONLY, segs, look=1)
    (r,) = w.results
    assert r.p_value is not None and r.p_value < r.threshold
    assert w.verdict == "PASS"
    strict = ITL_ONLY.model_copy(update={"metrics": [MetricRule(metric="itl_ms", budget=0.0)]})
    assert analyse_window(strict, segs, look=1).verdict == "FAIL"


def test_higher_is_better_fails_on_a_drop():
    rng = np.random.default_rng(6)
    faster_is_worse = AnalysisPolicy(
        metrics=[MetricRule(metric="itl_ms", direction="higher_is_better")], max_error_rate_increase=None, resamples=100
    )
    assert analyse_window(faster_is_worse, one_segment(pool(rng, 400), pool(rng, 400, slowdown=0.8)), 1).verdict == "FAIL"
    assert analyse_window(faster_is_worse, one_segment(pool(rng, 400), pool(rng, 400, slowdown=1.2)), 1).verdict == "PASS"


def test_too_few_samples_in_either_arm_is_inconclusive():
    rng = np.random.default_rng(7)
    w = analyse_window(ITL_ONLY, one_segment(pool(rng, 400), pool(rng, 20, slowdown=2.0)), look=1)
    assert w.verdict == "INCONCLUSIVE"
    assert "fewer than 50" in w.results[0].text


def test_a_small_segment_keeps_the_window_inconclusive_but_a_failing_one_fails_it():
    rng = np.random.default_rng(8)
    segs = {
        "big": SegmentSamples.model_construct(baseline=pool(rng, 400), candidate=pool(rng, 400), control=None),
        "tiny": SegmentSamples.model_construct(baseline=pool(rng, 400), candidate=pool(rng, 10), control=None),
    }
    assert analyse_window(ITL_ONLY, segs, 1).verdict == "INCONCLUSIVE"
    segs["big"] = SegmentSamples.model_construct(baseline=pool(rng, 400), candidate=pool(rng, 400, slowdown=1.3), control=None)
    w = analyse_window(ITL_ONLY, segs, 1)
    assert w.verdict == "FAIL"
    assert [r.segment for r in w.results if r.verdict == "FAIL"] == ["big"]


def test_a_rising_error_rate_fails_and_a_small_rise_does_not():
    rng = np.random.default_rng(9)
    policy = AnalysisPolicy(metrics=[], resamples=100)
    w = analyse_window(policy, one_segment(pool(rng, 1000, error_rate=0.001), pool(rng, 1000, error_rate=0.05)), 1)
    assert w.verdict == "FAIL" and w.results[0].metric == "error_rate"
    w = analyse_window(policy, one_segment(pool(rng, 1000, error_rate=0.01), pool(rng, 1000, error_rate=0.012)), 1)
    assert w.verdict == "PASS"


def test_at_a_twentieth_of_the_load_the_naive_comparison_flatters_and_the_stratified_one_does_not():
    """The candidate is 20 % slower at equal load but runs at 0-1 requests in flight against the baseline's 0-15."""
    rng = np.random.default_rng(10)
    base = pool(rng, 2000, in_flight=(0, 16))
    cand = pool(rng, 100, in_flight=(0, 2), slowdown=1.2)
    # Kayenta's plain rule (no power requirement) shows the bias: the naive comparison passes a slower candidate.
    naive = analyse_window(ITL_ONLY.model_copy(update={"min_power": 0.0}), one_segment(base, cand), look=1, matching="naive")
    matched = analyse_window(ITL_ONLY, one_segment(base, cand), look=1)
    assert naive.comparison == "naive" and naive.verdict == "PASS"
    # With the power rule the naive window cannot pass either: 100 candidate requests cannot see +10 % at 80 %.
    powered = analyse_window(ITL_ONLY, one_segment(base, cand), look=1, matching="naive")
    assert powered.verdict == "INCONCLUSIVE" and (powered.results[0].power or 1.0) < 0.8, powered.results[0].text
    assert naive.results[0].ratio is not None and naive.results[0].ratio.ratio < 1.0  # looks faster than baseline
    assert matched.comparison == "stratified" and matched.verdict == "FAIL", [r.text for r in matched.results]
    assert matched.results[0].ratio is not None and matched.results[0].ratio.ratio > 1.1
    # the common strata {0}, {1} hold 2/16 of the baseline's requests: reported
    assert any("barely overlap" in w for w in matched.warnings)


def test_a_control_pool_is_compared_directly_and_named():
    rng = np.random.default_rng(11)
    base = pool(rng, 2000, in_flight=(0, 16))
    control = pool(rng, 150, in_flight=(0, 2))
    w = analyse_window(ITL_ONLY, one_segment(base, pool(rng, 150, in_flight=(0, 2), slowdown=1.25), control), 1)
    assert w.comparison == "control" and w.verdict == "FAIL"
    assert w.results[0].n_baseline == 150  # the control's requests, not the baseline pool's
    # An equal candidate on 150 requests each is not significantly worse, but the test could not have seen +10 %:
    # INCONCLUSIVE, with the power and the window scale that would reach 80 %; on 600 each it passes.
    w = analyse_window(ITL_ONLY, one_segment(base, pool(rng, 150, in_flight=(0, 2)), control), 1)
    assert w.comparison == "control" and w.verdict == "INCONCLUSIVE", w.results[0].text
    result = w.results[0]
    assert result.power is not None and result.power < 0.8 and result.scale_needed is not None and result.scale_needed > 1
    assert "power" in result.text and "this window's requests would reach it" in result.text
    control = pool(rng, 600, in_flight=(0, 2))
    w = analyse_window(ITL_ONLY, one_segment(base, pool(rng, 600, in_flight=(0, 2)), control), 1)
    assert w.comparison == "control" and w.verdict == "PASS", w.results[0].text
    assert w.results[0].power is not None and w.results[0].power >= 0.8


def test_no_common_stratum_is_inconclusive():
    rng = np.random.default_rng(12)
    w = analyse_window(ITL_ONLY, one_segment(pool(rng, 400, in_flight=(8, 16)), pool(rng, 400, in_flight=(0, 2))), 1)
    assert w.verdict == "INCONCLUSIVE"
    assert "no in-flight stratum" in w.results[0].text


def test_an_unknown_metric_is_refused():
    with pytest.raises(ValidationError, match="unknown metric"):
        MetricRule(metric="latency")
