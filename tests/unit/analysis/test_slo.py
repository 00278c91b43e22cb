"""SLOs and goodput: the --slo grammar, which requests meet the SLOs, goodput over the run's window, its ratio."""

from __future__ import annotations

import math

import pytest

from specguard.analysis.ab_statistics import RatioResult
from specguard.analysis.request_metrics import measured_window
from specguard.analysis.slo import compare_goodput, goodput_guardrail, meets_slo, parse_slo, slo_attainment, slo_misses
from specguard.analysis.summarize import summarize
from specguard.errors import OptionError
from specguard.results.models import RequestRecord, Slo, Summary


def record(
    sent_s: float = 0.0,
    gaps_ms: list[float] | None = None,
    ttft_ms: float = 100.0,
    ok: bool = True,
    segment: str = "s",
) -> RequestRecord:
    gaps = [10.0] * 9 if gaps_ms is None else gaps_ms
    times = [ttft_ms / 1000]
    for g in gaps:
        times.append(times[-1] + g / 1000)
    return RequestRecord(
        index=0,
        seq=0,
        request_id="r",
        segment=segment,
        ok=ok,
        error=None if ok else "HTTP 500",
        http_status=200 if ok else 500,
        scheduled_s=sent_s,
        sent_s=sent_s,
        send_lag_s=0.0,
        ttft_s=times[0] if ok else None,
        e2e_s=times[-1] if ok else None,
        stream_end_s=times[-1] if ok else None,
        chunk_times_s=times if ok else [],
        chunk_tokens=[1] * len(times) if ok else [],
        token_source="server_usage" if ok else None,
        prompt_tokens=4,
        output_tokens=len(times) if ok else None,
        finish_reason="length" if ok else None,
    )


def test_slo_option_takes_any_subset() -> None:
    assert parse_slo("ttft_ms=500, itl_ms=50").given() == {"ttft_ms": 500.0, "itl_ms": 50.0}
    assert parse_slo("e2e_ms=2000,tpot_ms=25.5").given() == {"tpot_ms": 25.5, "e2e_ms": 2000.0}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("ttft=500", "unknown key 'ttft'"),
        ("ttft_ms=0", "ttft_ms must be a positive number"),
        ("itl_ms=-5", "itl_ms must be a positive number"),
        ("e2e_ms=nan", "e2e_ms must be a positive number"),
        ("e2e_ms=inf", "e2e_ms must be a positive number"),
        ("tpot_ms=fast", "is not a number"),
        ("ttft_ms", "expected KEY=MILLISECONDS"),
        ("ttft_ms=1,ttft_ms=2", "given twice"),
        ("", "give at least one of"),
    ],
)
def test_bad_slo_option_names_the_option(text: str, fragment: str) -> None:
    with pytest.raises(OptionError) as e:
        parse_slo(text)
    assert str(e.value).startswith("--slo") and fragment in str(e.value)


def test_itl_is_judged_at_the_requests_p95_not_its_maximum() -> None:
    # 39 gaps of 10 ms and one of 100 ms (a hiccup): the request's p95 is 10 ms, its maximum 100 ms.
    one_hiccup = record(gaps_ms=[10.0] * 38 + [100.0])
    assert meets_slo(one_hiccup, Slo(itl_ms=20))
    # a quarter of its gaps late: its p95 is late too
    slow_tail = record(gaps_ms=[10.0] * 30 + [100.0] * 10)
    assert slo_misses(slow_tail, Slo(itl_ms=20)) == ["itl_ms"]


def test_bounds_are_inclusive_and_every_given_slo_must_hold() -> None:
    r = record(ttft_ms=100.0, gaps_ms=[10.0] * 9)  # e2e 190 ms, TPOT 10 ms
    assert meets_slo(r, Slo(ttft_ms=100, e2e_ms=190.0001, tpot_ms=10.0001))
    assert slo_misses(r, Slo(ttft_ms=99, e2e_ms=150, itl_ms=50)) == ["ttft_ms", "e2e_ms"]


def test_failed_requests_never_meet_and_undefined_values_cannot_miss() -> None:
    assert not meets_slo(record(ok=False), Slo(e2e_ms=1e9))
    single_chunk = record(gaps_ms=[])  # no ITL, no TPOT
    assert meets_slo(single_chunk, Slo(itl_ms=1, tpot_ms=1))


def test_goodput_counts_met_requests_over_the_throughput_window() -> None:
    records = [
        record(sent_s=0.0),
        record(sent_s=1.0, ttft_ms=900.0),  # misses ttft
        record(sent_s=2.0, ok=False),
        record(sent_s=3.0),
    ]
    slo = Slo(ttft_ms=500)
    a = slo_attainment(records, slo)
    assert (a.met, a.attainment, a.missed_by) == (2, 0.5, {"ttft_ms": 1})
    assert a.goodput == pytest.approx(2 / measured_window(records))
    s = summarize(records, [], slo=slo)
    assert s.slo == a
    assert s.request_rate * a.attainment == pytest.approx(a.goodput), "goodput shares request_rate's window"
    assert summarize(records, []).slo is None


def test_a_summary_written_before_goodput_still_loads() -> None:
    s = summarize([record()], [])
    old = s.model_dump(mode="json")
    del old["slo"]
    assert Summary.model_validate(old).slo is None


def arm(attainment_every: int, reps: int = 3, n: int = 200, segment: str = "s") -> list[list[RequestRecord]]:
    """Each repetition: n requests 0.1 s apart; one in ``attainment_every`` misses a 500 ms TTFT."""
    return [
        [record(sent_s=i * 0.1, ttft_ms=900.0 if i % attainment_every == 0 else 100.0, segment=segment) for i in range(n)]
        for _ in range(reps)
    ]


SLO = Slo(ttft_ms=500)


def test_goodput_ratio_of_equal_arms_covers_one() -> None:
    r = compare_goodput(arm(4), arm(4), SLO, resamples=500)
    assert r.ratio == pytest.approx(1.0) and r.ci_low < 1.0 < r.ci_high and r.enough_samples


def test_goodput_ratio_sees_a_better_candidate() -> None:
    # baseline meets 3 in 4 (one in 4 misses), candidate 9 in 10
    base, cand = arm(4), arm(10)
    r = compare_goodput(base, cand, SLO, resamples=500)
    # the windows differ too: a late TTFT near the end stretches the run
    assert r.ratio == pytest.approx((180 / measured_window(cand[0])) / (150 / measured_window(base[0])))
    assert 1.0 < r.ci_low < r.ratio < r.ci_high
    assert r.baseline_ci[0] < r.baseline < r.baseline_ci[1]


def test_a_segments_goodput_is_its_requests_over_the_runs_window() -> None:
    base = [rep + [record(sent_s=0.05, segment="other")] for rep in arm(4, n=40)]
    window = measured_window(base[0])
    r = compare_goodput(base, base, SLO, segment="s", resamples=200)
    assert r.baseline == pytest.approx(30 / window) and r.n_baseline == 3 * 40


def test_repetitions_that_disagree_widen_the_interval() -> None:
    steady = arm(4)
    # candidate's repetitions swing from 1 in 2 to all met: far more than request-level noise
    swinging = [arm(2, reps=1)[0], arm(10**6, reps=1)[0], arm(4, reps=1)[0]]
    r = compare_goodput(steady, swinging, SLO, resamples=500)
    assert r.repetition_spread_widened
    assert not compare_goodput(steady, arm(4), SLO, resamples=500).repetition_spread_widened


def test_no_met_request_leaves_the_ratio_undefined_and_few_ask_for_more() -> None:
    none_met = [[record(sent_s=i * 0.1, ttft_ms=900.0) for i in range(20)]]
    r = compare_goodput(none_met, arm(4, reps=1), SLO, resamples=100)
    assert math.isnan(r.ratio) and not r.enough_samples
    few = [[record(sent_s=i * 0.1, ttft_ms=900.0 if i else 100.0) for i in range(20)]]  # 1 met of 20
    r = compare_goodput(few, arm(4, reps=1), SLO, resamples=100, min_tail=5)
    assert not r.enough_samples and r.more_requests_needed == 80  # 4 more met at 1 in 20


def ratio(lo: float, hi: float, enough: bool = True) -> RatioResult:
    return RatioResult(
        baseline=1.0,
        candidate=(lo + hi) / 2,
        ratio=(lo + hi) / 2,
        ci_low=lo,
        ci_high=hi,
        n_baseline=100,
        n_candidate=100,
        enough_samples=enough,
        more_requests_needed=7,
        mann_whitney_p=None,
        prob_candidate_lower=None,
        repetition_spread_widened=False,
    )


@pytest.mark.parametrize(
    ("lo", "hi", "enough", "status"),
    [
        (0.96, 1.10, True, "within"),
        (0.90, 1.02, True, "straddles"),
        (0.80, 0.94, True, "beyond"),
        (0.96, 1.10, False, "undersampled"),
        (math.nan, math.nan, True, "undersampled"),
    ],
)
def test_goodput_guardrail_is_a_non_inferiority_test(lo: float, hi: float, enough: bool, status: str) -> None:
    g = goodput_guardrail(ratio(lo, hi, enough), max_drop=0.05)
    assert g.status == status and g.bound == pytest.approx(0.95)
    if status == "straddles":
        assert "7 more requests" in g.text


@pytest.mark.slow  # 11.4 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_compare_runs_compares_goodput_only_under_one_set_of_slos() -> None:
    from specguard.analysis.compare import compare_runs
    from specguard.results.models import LoadShape, RunInfo, SamplingOverrides

    def info(slo: Slo | None) -> RunInfo:
        return RunInfo(
            tool_version="0",
            base_url="http://127.0.0.1:9",
            api="completions",
            model="m",
            metrics_url=None,
            prompt_source="synthetic:random",
            prompt_count=1,
            load=LoadShape(kind="constant", rate=10, num_requests=200),
            sampling=SamplingOverrides(),
            started_unix=0.0,
            started_monotonic=0.0,
            slo=slo,
        )

    b, c = arm(4, reps=1)[0], arm(10, reps=1)[0]
    same = compare_runs("b", (info(SLO), b), "c", (info(SLO), c))
    assert same.goodput is not None and same.goodput.ratio > 1 and not same.notes
    other = compare_runs("b", (info(SLO), b), "c", (info(Slo(ttft_ms=800)), c))
    assert other.comparable and other.goodput is None and "SLOs differ" in other.notes[0]
    assert compare_runs("b", (info(None), b), "c", (info(None), c)).goodput is None
