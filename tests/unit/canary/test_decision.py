"""The rollout rule, alone and driven by the window analysis over simulated rollouts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from specguard.canary.judge.decision import (
    CriticalEvent,
    Decision,
    RolloutRule,
    StepProgress,
    StepRule,
    WindowRecord,
    decide,
)
from specguard.canary.judge.window import AnalysisPolicy, MetricRule, SegmentSamples, WindowVerdict, analyse_window
from tests.unit.canary.test_analysis import pool

RULE = RolloutRule(
    steps=[StepRule(percent=5, min_seconds=120, min_requests=100), StepRule(percent=100, min_seconds=120, min_requests=100)]
)
READY = StepProgress(step=0, seconds_in_step=600, requests_in_step=1000)


def windows(*verdicts: WindowVerdict, step: int = 0) -> list[WindowRecord]:
    return [WindowRecord(step=step, verdict=v) for v in verdicts]


def codes(d: Decision) -> list[str]:
    return [r.code for r in d.reasons]


# ---- the rule alone ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("oom", "critical_oom"),
        ("crash", "critical_crash"),
        ("http_5xx_burst", "critical_5xx_burst"),
        ("stream_error_burst", "critical_stream_error_burst"),
    ],
)
def test_one_critical_condition_rolls_back_at_once(kind, code):
    event = CriticalEvent(kind=kind, server="http://127.0.0.1:8001", count=12, threshold=10)
    d = decide(RULE, READY, windows("PASS", "PASS", "PASS"), [event])
    assert d.kind == "rollback" and d.percent == 0.0
    assert codes(d) == [code]
    assert d.reasons[0].numbers == {"count": 12.0, "threshold": 10.0}
    assert "127.0.0.1:8001" in d.reasons[0].text


def test_n_consecutive_failing_windows_roll_back_and_fewer_hold():
    assert decide(RULE, READY, windows("PASS", "FAIL")).kind == "hold"
    d = decide(RULE, READY, windows("PASS", "FAIL", "FAIL"))
    assert d.kind == "rollback" and codes(d)[0] == "windows_failed"
    assert d.reasons[0].numbers == {"failed": 2.0, "needed": 2.0}


def test_a_pass_breaks_a_failing_run_and_an_inconclusive_window_does_not():
    assert decide(RULE, READY, windows("FAIL", "PASS", "FAIL")).kind == "hold"
    assert decide(RULE, READY, windows("FAIL", "INCONCLUSIVE", "FAIL")).kind == "rollback"


def test_inconclusive_windows_never_promote_nor_roll_back():
    d = decide(RULE, READY, windows(*["INCONCLUSIVE"] * 20))
    assert d.kind == "hold" and "window_inconclusive" in codes(d)
    # M passes, then no data: the latest window cannot be what advances the step
    d = decide(RULE, READY, windows("PASS", "PASS", "PASS", "INCONCLUSIVE"))
    assert d.kind == "hold" and codes(d) == ["window_inconclusive"]


def test_advance_needs_time_requests_and_m_passes():
    three = windows("PASS", "PASS", "PASS")
    d = decide(RULE, READY, three)
    assert d.kind == "advance" and d.step == 1 and d.percent == 100
    short_time = StepProgress(step=0, seconds_in_step=60, requests_in_step=1000)
    assert codes(decide(RULE, short_time, three)) == ["step_time_short"]
    short_requests = StepProgress(step=0, seconds_in_step=600, requests_in_step=99)
    assert codes(decide(RULE, short_requests, three)) == ["step_requests_short"]
    d = decide(RULE, READY, windows("PASS", "PASS"))
    assert d.kind == "hold" and codes(d) == ["windows_pass_short"]
    assert d.reasons[0].numbers == {"passed": 2.0, "needed": 3.0}


THREE = RolloutRule(steps=[StepRule(percent=5), StepRule(percent=50), StepRule(percent=100, min_seconds=120, min_requests=100)])


def test_passes_at_an_earlier_step_do_not_count_at_this_one():
    history = windows("PASS", "PASS", "PASS", step=0) + windows("PASS", step=1)
    d = decide(THREE, StepProgress(step=1, seconds_in_step=600, requests_in_step=1000), history)
    assert d.kind == "hold" and d.reasons[0].numbers["passed"] == 1.0


def test_the_last_step_at_100_percent_is_a_bake_time():
    """At 100 % no baseline traffic is left, so its windows cannot pass: time, requests and no critical condition."""
    history = windows("PASS", "PASS", "PASS", step=0) + windows("INCONCLUSIVE", "INCONCLUSIVE", step=1)
    early = decide(RULE, StepProgress(step=1, seconds_in_step=60, requests_in_step=1000), history)
    assert early.kind == "hold" and codes(early) == ["step_time_short"]
    d = decide(RULE, StepProgress(step=1, seconds_in_step=600, requests_in_step=1000), history)
    assert d.kind == "promote" and d.percent == 100 and codes(d) == ["windows_passed", "promoted"]
    assert "no baseline traffic" in d.reasons[0].text
    crash = decide(RULE, StepProgress(step=1, seconds_in_step=600, requests_in_step=1000), history, [CriticalEvent(kind="crash")])
    assert crash.kind == "rollback"
    failing = decide(RULE, StepProgress(step=1, seconds_in_step=600, requests_in_step=1000), history + windows("FAIL", step=1))
    assert failing.kind == "hold" and "window_failed_once" in codes(failing)


def test_steps_must_rise_to_100_percent():
    with pytest.raises(ValidationError, match="100 %"):
        RolloutRule(steps=[StepRule(percent=5), StepRule(percent=50)])
    with pytest.raises(ValidationError, match="rise"):
        RolloutRule(steps=[StepRule(percent=50), StepRule(percent=5), StepRule(percent=100)])
    assert [s.percent for s in RolloutRule().steps] == [1, 5, 10, 25, 50, 100]


def test_an_unknown_step_is_refused():
    with pytest.raises(ValueError, match="does not exist"):
        decide(RULE, StepProgress(step=2, seconds_in_step=0, requests_in_step=0), [])


# ---- simulated rollouts: analysis + rule --------------------------------------------------------------

Window = Callable[[np.random.Generator, int], dict[str, SegmentSamples]]


def simulate(
    policy: AnalysisPolicy,
    rule: RolloutRule,
    window: Window,
    n_windows: int,
    seed: int,
    critical_at: int | None = None,
) -> tuple[int | None, list[Decision]]:
    """Drive analysis and rule window by window (60 s each): the window that rolled back (1-based), and the decisions."""
    rng = np.random.default_rng(seed)
    history: list[WindowRecord] = []
    step, seconds, requests = 0, 0.0, 0
    decisions: list[Decision] = []
    for k in range(1, n_windows + 1):
        segs = window(rng, k)
        w = analyse_window(policy, segs, look=k, seed=seed * 1000 + k)
        history.append(WindowRecord(step=step, verdict=w.verdict, failures=[r for r in w.results if r.verdict == "FAIL"]))
        seconds += 60
        requests += sum(len(s.candidate) for s in segs.values())
        events = [CriticalEvent(kind="oom", server="candidate-0")] if k == critical_at else []
        d = decide(rule, StepProgress(step=step, seconds_in_step=seconds, requests_in_step=requests), history, events)
        decisions.append(d)
        if d.kind == "rollback":
            return k, decisions
        if d.kind == "promote":
            return None, decisions
        if d.kind == "advance":
            step, seconds, requests = d.step, 0.0, 0
    return None, decisions


HOLDING = RolloutRule(steps=[StepRule(percent=100, min_seconds=10**9)])  # never advances: every window is a look
FAST = AnalysisPolicy(
    metrics=[MetricRule(metric="itl_ms"), MetricRule(metric="e2e_ms")], max_error_rate_increase=0.005, resamples=100
)


def equal_pools(rng: np.random.Generator, k: int) -> dict[str, SegmentSamples]:
    """Two pools that do not differ: 120 and 80 requests a window, a shared drift, 1 % errors on both."""
    drift = float(rng.lognormal(0, 0.1))  # the window's traffic mix moves both pools alike
    return {
        "all": SegmentSamples.model_construct(
            baseline=pool(rng, 120, drift=drift, error_rate=0.01, tokens=4),
            candidate=pool(rng, 80, drift=drift, error_rate=0.01, tokens=4),
            control=None,
        )
    }


def test_a_20_percent_p99_itl_regression_is_rolled_back_within_n_plus_1_windows():
    onset = 4  # passes first, then the candidate turns 20 % slower

    def window(rng: np.random.Generator, k: int) -> dict[str, SegmentSamples]:
        slow = 1.2 if k >= onset else 1.0
        return {
            "all": SegmentSamples.model_construct(baseline=pool(rng, 300), candidate=pool(rng, 150, slowdown=slow), control=None)
        }

    rule = RolloutRule(steps=[StepRule(percent=5, min_seconds=0, min_requests=0), StepRule(percent=100, min_seconds=10**9)])
    for seed in range(5):
        rolled_back, decisions = simulate(FAST, rule, window, 20, seed)
        assert rolled_back is not None and rolled_back - onset + 1 <= rule.windows_to_rollback + 1, (seed, rolled_back)
        last = decisions[-1]
        assert last.kind == "rollback" and "windows_failed" in codes(last)
        failed = [r for r in last.reasons if r.code == "metric_failed"]
        assert failed and failed[0].metric == "p99_itl_ms" and failed[0].segment == "all"
        assert failed[0].numbers["ratio"] > 1.1


def _allowed(rollouts: int, alpha: float) -> int:
    """The most false rollbacks a rate of at most alpha makes plausible: the binomial's 99.9 % quantile."""
    return int(stats.binom.ppf(0.999, rollouts, alpha))


@pytest.mark.slow  # 35 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_equal_pools_for_30_windows_give_no_more_false_rollbacks_than_alpha_allows():
    """The strictest setting for error control: no effect-size gate (budget 0) and a rollback on one failing window.

    Here only the alpha spending stands between noise and a rollback; testing at 0.05 on every window would roll
    back about 1 - 0.95^30 = 79 % of these rollouts.
    """
    strict = AnalysisPolicy(
        metrics=[MetricRule(metric="itl_ms", budget=0.0)], max_error_rate_increase=None, max_looks=30, resamples=100
    )
    rule = HOLDING.model_copy(update={"windows_to_rollback": 1})
    rollouts = 100  # e.g. 200 in the brief: 100 keep this test under a minute on two busy cores, and still tell
    # a working error control (at most 13 allowed) from none (about 79 expected)
    false = sum(simulate(strict, rule, equal_pools, 30, seed)[0] is not None for seed in range(rollouts))
    assert false <= _allowed(rollouts, strict.alpha), f"{false} false rollbacks in {rollouts} rollouts of 30 windows"


@pytest.mark.slow  # 13 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_equal_pools_under_the_default_rule_roll_back_none_of_20_rollouts():
    rollouts = 20
    false = sum(simulate(FAST, HOLDING, equal_pools, 30, seed)[0] is not None for seed in range(rollouts))
    assert false == 0, f"{false} false rollbacks in {rollouts} rollouts of 30 windows (default rule, two windows, budgets)"


def test_a_candidate_at_a_twentieth_of_the_load_is_not_flattered_by_the_matched_comparison():
    """20 % slower at equal load, but at 0-1 requests in flight: naive would pass it, the stratified comparison fails it."""

    def window(rng: np.random.Generator, k: int) -> dict[str, SegmentSamples]:
        base, cand = pool(rng, 2000, in_flight=(0, 16)), pool(rng, 100, in_flight=(0, 2), slowdown=1.2)
        return {"all": SegmentSamples.model_construct(baseline=base, candidate=cand, control=None)}

    itl = AnalysisPolicy(metrics=[MetricRule(metric="itl_ms")], max_error_rate_increase=None, resamples=100)
    plain = itl.model_copy(update={"min_power": 0.0})  # Kayenta's rule without the power requirement shows the bias
    naive_first = analyse_window(plain, window(np.random.default_rng(0), 1), look=1, matching="naive")
    assert naive_first.verdict == "PASS"
    rolled_back, decisions = simulate(itl, HOLDING, window, 10, seed=0)
    assert rolled_back is not None and rolled_back <= HOLDING.windows_to_rollback + 1


def test_too_little_traffic_holds_instead_of_rolling_back():
    def window(rng: np.random.Generator, k: int) -> dict[str, SegmentSamples]:
        # a badly regressed candidate, but with 10 requests a window: no evidence, so no verdict
        return {
            "all": SegmentSamples.model_construct(baseline=pool(rng, 300), candidate=pool(rng, 10, slowdown=2.0), control=None)
        }

    rolled_back, decisions = simulate(FAST, RULE, window, 15, seed=0)
    assert rolled_back is None
    assert {d.kind for d in decisions} == {"hold"}
    assert all("window_inconclusive" in codes(d) for d in decisions)


def test_a_critical_condition_mid_rollout_rolls_back_at_that_window():
    rolled_back, decisions = simulate(FAST, HOLDING, equal_pools, 10, seed=1, critical_at=4)
    assert rolled_back == 4
    assert codes(decisions[-1]) == ["critical_oom"]
