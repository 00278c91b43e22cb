"""Check plans: the shipped examples validate, bad plans name the key and what was expected."""

from pathlib import Path

import pytest

from specguard.check.plan import CheckPlanError, load_plan
from specguard.check.runner import blocks
from specguard.demo import DEMO_PLAN

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "name", ["embedded-ngram.yaml", "embedded-suffix.yaml", "gpu-llama70b-draft8b.yaml", "gpu-llama70b-ngram.yaml"]
)
def test_example_plans_validate(name):
    plan = load_plan(ROOT / "examples" / name)
    assert {t.name for t in plan.traffic} >= {"idle", "steady", "burst"}
    assert any(t.target for t in plan.traffic)
    assert plan.arms.candidate.launch.speculative_config
    assert plan.arms.baseline.launch.speculative_config is None


def test_the_embedded_example_is_the_demo_plan():
    assert load_plan(ROOT / "examples" / "embedded-ngram.yaml") == load_plan(DEMO_PLAN)


def test_prompt_files_resolve_relative_to_the_plan():
    plan = load_plan(ROOT / "examples" / "gpu-llama70b-ngram.yaml")
    assert plan.prompts[0].source == str(ROOT / "examples" / "prompts.jsonl")


def test_order_of_blocks():
    plan = load_plan(DEMO_PLAN)
    assert blocks(plan) == [(1, "baseline"), (1, "candidate"), (2, "baseline"), (2, "candidate")]
    blocked = plan.model_copy(update={"order": "blocked"})
    assert blocks(blocked) == [(1, "baseline"), (2, "baseline"), (1, "candidate"), (2, "candidate")]


BASE = """
arms:
  baseline: {endpoint: {base_url: "http://127.0.0.1:8000", model: m}}
  candidate: {endpoint: {base_url: "http://127.0.0.1:8001", model: m}}
traffic: [{name: steady, rate: 2, num_requests: 10, target: true}]
sampling: [{name: t0, temperature: 0}]
prompts: [{source: "synthetic:random"}]
"""


@pytest.mark.parametrize(
    "change,expected",
    [
        (("rate: 2", "rate: -2"), "key 'traffic.0.rate'"),
        (("model: m}}\n  candidate", "model: m, api_key: s}}\n  candidate"), "key 'arms.baseline.endpoint.api_key': unknown key"),
        (("target: true", "target: false"), "mark at least one traffic level"),
        (("temperature: 0", "temprature: 0"), "key 'sampling.0.temprature': unknown key"),
        (("rate: 2, num_requests: 10", "rate: 2, concurrency: 3, num_requests: 10"), "only one of rate, concurrency"),
        (('{endpoint: {base_url: "http://127.0.0.1:8001", model: m}}', "{}"), "exactly one of 'launch' or 'endpoint'"),
        (('prompts: [{source: "synthetic:random"}]', "prompts: []"), "key 'prompts'"),
    ],
)
def test_bad_plans_name_the_key(tmp_path, change, expected):
    p = tmp_path / "plan.yaml"
    old, new = change
    assert old in BASE
    p.write_text(BASE.replace(old, new))
    with pytest.raises(CheckPlanError) as e:
        load_plan(p)
    assert str(p) in str(e.value) and expected in str(e.value)


def test_not_yaml_and_not_a_mapping(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text("arms: [unclosed\n")
    with pytest.raises(CheckPlanError, match="not valid YAML"):
        load_plan(p)
    p.write_text("- a\n- b\n")
    with pytest.raises(CheckPlanError, match="expected a mapping"):
        load_plan(p)


def test_slo_key_and_goodput_objective(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text(BASE + "slo: {ttft_ms: 500, itl_ms: 50}\nobjective: {metric: goodput}\n")
    plan = load_plan(p)
    assert plan.slo is not None and plan.slo.given() == {"ttft_ms": 500.0, "itl_ms": 50.0}
    assert plan.objective.metric == "goodput"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("objective: {metric: goodput}\n", "objective metric goodput needs 'slo:'"),
        ("slo: {ttft: 500}\n", "key 'slo.ttft': unknown key"),
        ("slo: {ttft_ms: 0}\n", "key 'slo.ttft_ms'"),
        ("slo: {}\n", "give at least one of ttft_ms"),
    ],
)
def test_bad_slo_in_a_plan_names_the_key(tmp_path, extra, expected):
    p = tmp_path / "plan.yaml"
    p.write_text(BASE + extra)
    with pytest.raises(CheckPlanError) as e:
        load_plan(p)
    assert str(p) in str(e.value) and expected in str(e.value)
