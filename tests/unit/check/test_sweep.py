"""The sweep's choices, pure: rates between the probes, the bracket, bisection and when it stops; the plan form."""

from __future__ import annotations

import pytest

from specguard.check.plan import CheckPlan, CheckPlanError, load_plan
from specguard.check.sweep import SweepRecord, SweepSpec, SweepStage, between_rates, bracket, next_stage


def test_rates_are_evenly_spaced_strictly_between_the_probes():
    assert between_rates(2.0, 12.0, 4) == pytest.approx([4.0, 6.0, 8.0, 10.0])
    assert between_rates(5.0, 5.0, 3) == []


def _measured(spec: SweepSpec, sync: float, sat: float) -> SweepRecord:
    probe = next_stage(spec, SweepRecord(), {})
    assert isinstance(probe, SweepStage) and [lv.concurrency for lv in probe.levels] == [1, spec.max_concurrency]
    probe.levels[0].load_rps, probe.levels[1].load_rps = sync, sat
    rec = SweepRecord(stages=[probe])
    rates = next_stage(spec, rec, {})
    assert isinstance(rates, SweepStage)
    rec.stages.append(rates)
    return rec


def test_bisection_narrows_the_bracket_around_the_crossover_and_then_stops():
    spec = SweepSpec(rates=3, bisect_steps=2, arrival="constant")
    rec = _measured(spec, 2.0, 10.0)
    assert [lv.rate for lv in rec.stages[1].levels] == pytest.approx([4.0, 6.0, 8.0])
    knee = 6.7  # speculation pays below it
    for step in (1, 2):
        paid = {lv.name: (lv.load_rps or 0) < knee for lv in rec.levels}
        stage = next_stage(spec, rec, paid)
        assert isinstance(stage, SweepStage) and stage.name == f"bisect-{step}"
        rec.stages.append(stage)
    paid = {lv.name: (lv.load_rps or 0) < knee for lv in rec.levels}
    lo, hi = bracket(rec.levels, paid) or (None, None)
    assert lo is not None and hi is not None
    assert (lo.load_rps, hi.load_rps) == pytest.approx((6.5, 7.0))  # 6 | 8 -> 7 -> 6.5
    done = next_stage(spec, rec, paid)
    assert isinstance(done, str) and "after 2 bisection" in done


def test_no_crossover_ends_the_sweep_with_the_reason():
    spec = SweepSpec(rates=2)
    rec = _measured(spec, 1.0, 4.0)
    assert next_stage(spec, rec, {lv.name: True for lv in rec.levels}) == "no crossover: speculation paid at every measured rate"
    assert "at no measured rate" in str(next_stage(spec, rec, {lv.name: False for lv in rec.levels}))


def test_the_target_is_the_named_rate_or_one_at_a_time():
    plain = _measured(SweepSpec(rates=1), 1.0, 3.0)
    assert [lv.name for lv in plain.levels if lv.target] == ["sync"]
    named = _measured(SweepSpec(rates=1, target_rate=2.5), 1.0, 3.0)
    assert [(lv.name, lv.rate) for lv in named.levels if lv.target] == [("target", 2.5)]


PLAN = """
arms:
  baseline: {endpoint: {base_url: "http://127.0.0.1:1/v1", model: m}}
  candidate: {endpoint: {base_url: "http://127.0.0.1:2/v1", model: m}}
traffic:
  sweep: {SWEEP}
sampling: [{name: greedy, temperature: 0}]
prompts: [{source: "synthetic:random", count: 4}]
"""


def test_a_sweep_plan_loads_and_its_errors_name_the_key(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN.replace("{SWEEP}", "{rates: 3, bisect_steps: 1, num_requests: 20}"))
    plan = load_plan(p)
    assert isinstance(plan, CheckPlan) and plan.sweep is not None and plan.sweep.rates == 3
    assert [t.name for t in plan.levels] == ["sync", "saturate"]
    p.write_text(PLAN.replace("{SWEEP}", "{rates: 0}"))
    with pytest.raises(CheckPlanError) as e:
        load_plan(p)
    assert "traffic.sweep.rates" in str(e.value)


def test_a_sweep_plan_serializes_as_a_sweep_and_reads_back(tmp_path, recwarn):
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN.replace("{SWEEP}", "{rates: 2, num_requests: 6}"))
    plan = load_plan(p)
    again = CheckPlan.model_validate_json(plan.model_dump_json())  # as check.json stores it
    assert again.sweep == plan.sweep and again.sweep is not None and again.sweep.rates == 2
    assert not [w for w in recwarn if "serializ" in str(w.message).lower()], [str(w.message) for w in recwarn]
