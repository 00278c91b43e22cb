"""The verdict as a decision table over synthetic cell results: every branch."""

import pytest

from specguard.analysis.ab_statistics import RatioResult
from specguard.check.plan import Guardrails, Objective
from specguard.verdict import CellComparison, Failure, OneArmCell, decide


def rr(ratio, lo, hi, enough=True, n=1000, more=0):
    return RatioResult(
        baseline=10.0,
        candidate=10.0 * ratio,
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        n_baseline=n,
        n_candidate=n,
        enough_samples=enough,
        more_requests_needed=more,
        mann_whitney_p=0.01,
        prob_candidate_lower=0.6,
        repetition_spread_widened=False,
    )


SAME = rr(1.0, 0.95, 1.05)


def cell(
    obj=None,
    e2e=SAME,
    ttft=SAME,
    target=True,
    traffic="steady",
    load=2.0,
    err=(0, 0),
    n_req=(2000, 2000),
    pre=(0, 0),
    segment="chat",
    **kw,
):
    """err: failed requests per arm, out of n_req."""
    return CellComparison(
        traffic=traffic,
        offered_load=load,
        target=target,
        sampling="prod",
        segment=segment,
        objective=obj or rr(0.7, 0.6, 0.8),
        p99_e2e=e2e,
        p99_ttft=ttft,
        error_rate_baseline=err[0] / n_req[0],
        error_rate_candidate=err[1] / n_req[1],
        errors_baseline=err[0],
        errors_candidate=err[1],
        requests_baseline=n_req[0],
        requests_candidate=n_req[1],
        preemptions_baseline=pre[0],
        preemptions_candidate=pre[1],
        **kw,
    )


def run(cells, failures=()):
    return decide(cells, Objective(), Guardrails(), failures)


def codes(v):
    return [r.code for r in v.reasons]


def test_go_when_the_objective_improves_significantly_and_nothing_regresses():
    v = run([cell(), cell(target=False, traffic="burst", load=8, obj=SAME)])
    assert v.verdict == "GO" and codes(v) == ["go"]
    assert [line.status for line in v.lines] == ["better", "no detectable difference"]


def test_improvement_without_significance_is_no_go():
    v = run([cell(obj=rr(0.85, 0.7, 1.02))])
    assert v.verdict == "NO-GO" and codes(v) == ["objective_no_difference"]
    r = v.reasons[0]
    assert r.cell == "steady / prod / chat" and r.metric == "p95 itl_ms"
    assert r.numbers == pytest.approx({"gain": 0.15, "ci_low": -0.02, "ci_high": 0.30})


def test_significant_but_below_the_minimum_is_no_go():
    v = run([cell(obj=rr(0.95, 0.92, 0.98))])
    assert v.verdict == "NO-GO" and codes(v) == ["objective_below_minimum"]
    assert v.reasons[0].numbers["min_improvement"] == 0.10 and v.reasons[0].numbers["gain"] == pytest.approx(0.05)


def test_worse_objective_at_target_is_no_go():
    v = run([cell(obj=rr(1.3, 1.2, 1.4))])
    assert v.verdict == "NO-GO" and codes(v) == ["objective_worse"]
    assert v.lines[0].status == "worse"


def test_tail_beyond_its_budget_at_any_level_is_no_go():
    v = run([cell(), cell(target=False, traffic="burst", load=8, e2e=rr(1.4, 1.2, 1.6))])
    assert v.verdict == "NO-GO" and codes(v) == ["guardrail_regressed"]
    r = v.reasons[0]
    assert r.metric == "P99 E2E" and r.cell.startswith("burst") and r.numbers["ratio"] == 1.4 and r.numbers["budget"] == 0.05
    assert r.numbers["p_value"] < 0.05 / 6
    # an interval within the budget holds, even when it excludes no change
    assert run([cell(ttft=rr(1.02, 1.01, 1.04))]).verdict == "GO"


def test_a_wide_interval_over_the_budget_is_not_go():
    """The old rule passed a 30 % regression whose interval included no change; now it straddles the budget."""
    v = run([cell(ttft=rr(1.3, 0.9, 1.7))])
    assert v.verdict == "INCONCLUSIVE" and codes(v) == ["guardrail_unresolved"]
    r = v.reasons[0]
    assert r.metric == "P99 TTFT" and r.numbers["more_requests_needed"] > 0 and "straddles" in r.text
    # a narrower interval at the same ratio needs fewer more requests
    narrow = run([cell(ttft=rr(1.3, 1.0, 1.6))]).reasons[0].numbers["more_requests_needed"]
    assert narrow < r.numbers["more_requests_needed"]
    # within no change but reaching past the budget: still not GO
    assert codes(run([cell(ttft=rr(1.0, 0.9, 1.1))])) == ["guardrail_unresolved"]


def test_beyond_the_budget_is_corrected_for_the_number_of_guardrails():
    """Holm: a lower end just over the budget in one test of one cell is NO-GO; among many cells it is not enough."""
    edge = rr(1.25, 1.08, 1.42)
    assert run([cell(ttft=edge)]).verdict == "NO-GO"
    many = run([cell(ttft=edge)] + [cell(segment=f"s{i}") for i in range(20)])
    assert many.verdict == "INCONCLUSIVE" and codes(many) == ["guardrail_unresolved"]


def test_error_increase_beyond_budget_is_no_go():
    v = run([cell(err=(0, 100))])
    assert v.verdict == "NO-GO" and codes(v) == ["error_rate_rose"]
    n = v.reasons[0].numbers
    assert n["baseline"] == 0.0 and n["candidate"] == 0.05 and n["budget"] == 0.01 and n["ci_low"] > 0.01
    assert run([cell(err=(0, 4))]).verdict == "GO"


def test_equal_background_error_rates_are_not_no_go():
    v = run([cell(err=(1, 1), n_req=(30, 30))])
    assert v.verdict != "NO-GO" and codes(v) == ["error_rate_unresolved"]
    # one failure in 30 on the candidate alone is not evidence of a rise beyond 1 point either
    assert run([cell(err=(0, 1), n_req=(30, 30))]).verdict == "INCONCLUSIVE"
    # enough requests resolve it
    assert run([cell(err=(30, 30), n_req=(3000, 3000))]).verdict == "GO"


def test_error_counts_fall_back_to_rates_for_older_cells():
    c = cell().model_copy(
        update={"errors_baseline": None, "errors_candidate": None, "error_rate_candidate": 0.05, "p99_e2e": rr(1.0, 0.98, 1.02)}
    )
    assert codes(run([c])) == ["error_rate_rose"]


def test_a_cell_measured_on_one_arm_is_a_reason():
    gone = OneArmCell(traffic="burst", sampling="prod", segment="chat", measured="baseline")
    v = decide([cell()], Objective(), Guardrails(), one_arm=[gone])
    assert v.verdict == "INCONCLUSIVE" and codes(v) == ["cell_one_arm"] and v.reasons[0].cell == "burst / prod / chat"


def test_preemption_increase_is_no_go():
    v = run([cell(pre=(0, 3))])
    assert v.verdict == "NO-GO" and codes(v) == ["preemptions_rose"] and v.reasons[0].numbers["candidate"] == 3


@pytest.mark.parametrize("kind", ["oom", "crash"])
def test_oom_or_crash_is_no_go_whatever_else(kind):
    v = run([cell()], failures=[Failure(arm="candidate", kind=kind, detail="exit 137")])
    assert v.verdict == "NO-GO"
    assert codes(v) == [f"server_{kind}"]


def test_too_few_samples_is_inconclusive_and_says_how_many_more():
    v = run([cell(obj=rr(0.7, 0.5, 0.9, enough=False, n=12, more=300))])
    assert v.verdict == "INCONCLUSIVE" and codes(v) == ["objective_undersampled"]
    assert v.reasons[0].numbers == {"more_requests_needed": 300}
    v = run([cell(e2e=rr(1.0, 0.8, 1.3, enough=False, n=80, more=420))])
    assert v.verdict == "INCONCLUSIVE" and codes(v) == ["guardrail_unverified"]
    assert v.reasons[0].metric == "P99 E2E" and v.reasons[0].numbers == {"requests_per_arm": 80, "more_requests_needed": 420}


def test_no_go_outranks_inconclusive_and_keeps_both_reasons():
    v = run([cell(obj=rr(1.3, 1.2, 1.4)), cell(segment="code", e2e=rr(1.0, 0.8, 1.3, enough=False, more=50))])
    assert v.verdict == "NO-GO" and codes(v) == ["objective_worse", "guardrail_unverified"]
    assert [r.secondary for r in v.reasons] == [False, True]
    assert v.reason_texts[1].startswith("also:")


def test_every_target_segment_must_improve():
    v = run([cell(segment="extraction"), cell(segment="chat", obj=SAME)])
    assert v.verdict == "NO-GO" and codes(v) == ["objective_no_difference"] and v.reasons[0].cell.endswith("chat")


def test_throughput_objective_is_higher_is_better():
    v = decide([cell(obj=rr(1.3, 1.2, 1.4))], Objective(metric="output_tokens_per_s"), Guardrails())
    assert v.verdict == "GO"


def test_crossover_is_named_and_warnings_do_not_change_the_verdict():
    cells = [
        cell(traffic="idle", load=1, target=False),
        cell(traffic="steady", load=2),
        cell(
            traffic="burst",
            load=8,
            target=False,
            obj=rr(1.2, 1.1, 1.3),
            acceptance_rate=0.3,
            kv_usage_baseline=0.2,
            kv_usage_candidate=0.5,
            client_warnings=["client send lag p99 30 ms"],
        ),
    ]
    v = run(cells)
    assert v.verdict == "GO"
    assert v.crossover == [
        "prod / chat: speculation stops paying at 'burst' (offered load 8): worse; it paid at 'steady' (2): "
        "the crossover lies between offered load 2 and 8"
    ]
    text = " ".join(v.warnings)
    assert "acceptance rate 0.30" in text and "KV-cache usage rose" in text and "send lag" in text


def test_nothing_measured_is_never_go():
    v = run([])
    assert v.verdict == "INCONCLUSIVE" and codes(v) == ["no_cell_measured"]
    # a failure still outranks it: NO-GO, for the failure alone
    v = run([], failures=[Failure(arm="baseline", kind="crash", detail="exit 1")])
    assert v.verdict == "NO-GO" and codes(v) == ["server_crash"]


def test_many_unverified_guardrails_are_kept_as_data_and_counted_by_their_group():
    from specguard.verdict.reason_groups import group_reasons

    few = rr(1.0, 0.8, 1.3, enough=False, n=80, more=420)
    v = run([cell(segment=f"s{i}", e2e=few, ttft=few) for i in range(3)])
    assert v.verdict == "INCONCLUSIVE"
    assert codes(v) == ["guardrail_unverified"] * 6  # every one in verdict.json, none condensed away
    groups = {(g.kind, g.metric): g.count for g in group_reasons(v.reasons)}
    assert groups == {("guardrail_unverified", "P99 E2E"): 3, ("guardrail_unverified", "P99 TTFT"): 3}


def test_crossover_bracket_is_the_last_paid_and_the_first_unpaid_load_per_group():
    from specguard.verdict import crossover_brackets

    better, same, worse = rr(0.7, 0.6, 0.8), rr(1.0, 0.9, 1.1), rr(1.3, 1.2, 1.4)
    cells = [
        cell(traffic="r1", load=1, obj=better),
        cell(traffic="r3", load=3, obj=better, target=False),
        cell(traffic="r4", load=4, obj=same, target=False),
        cell(traffic="r9", load=9, obj=worse, target=False),
    ]
    # measured out of order: the bracket follows the load, not the list
    [x] = crossover_brackets(list(reversed(cells)), higher_is_better=False)
    assert (x.paid_traffic, x.paid_load, x.unpaid_traffic, x.unpaid_load) == ("r3", 3, "r4", 4)
    assert x.unpaid_status == "no detectable difference"
    # never paid: no crossover to name
    assert crossover_brackets([cell(traffic="a", load=1, obj=worse), cell(traffic="b", load=2, obj=worse)], False) == []
