"""A plan's ``prompts:`` entries take the dataset keys (format, fields, turns, synthetic), resolved and checked at load."""

import json

import pytest

from specguard.check.plan import CheckPlanError, load_plan
from specguard.check.runner import resolve_plan

PLAN = """
arms:
  baseline: {endpoint: {base_url: "http://127.0.0.1:8000", model: m}}
  candidate: {endpoint: {base_url: "http://127.0.0.1:8001", model: m}}
traffic: [{name: steady, rate: 2, num_requests: 10, target: true}]
sampling: [{name: t0, temperature: 0}]
prompts:
PROMPTS
"""


def plan_file(tmp_path, prompts):
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN.replace("PROMPTS", prompts))
    return p


def test_dataset_entries_load_relative_to_the_plan(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "question.jsonl").write_text(
        json.dumps({"question_id": 1, "category": "math", "turns": ["2+2?"]}) + "\n"
    )
    conv = [
        {
            "id": "a",
            "conversations": [
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "yo"},
                {"from": "human", "value": "more"},
                {"from": "gpt", "value": "ok"},
            ],
        }
    ]
    (tmp_path / "data" / "sg.json").write_text(json.dumps(conv))
    p = plan_file(
        tmp_path,
        "  - {source: data/question.jsonl, format: spec-bench}\n"
        "  - {source: data/sg.json, format: sharegpt, turns: all, fields: {segment: id}}\n",
    )
    plan = load_plan(p)
    assert plan.prompts[0].source == str(tmp_path / "data" / "question.jsonl")
    sets = resolve_plan(plan, p).prompt_sets
    assert [i.segment for i in sets[0].items] == ["math"]
    assert [(i.segment, len(i.messages)) for i in sets[1].items] == [("a", 1), ("a", 3)]


def test_synthetic_lengths_entry_resolves_its_tokenizer_relative_to_the_plan(tmp_path):
    p = plan_file(
        tmp_path,
        "  - {source: 'synthetic:lengths', count: 4,\n"
        "     synthetic: {prompt_tokens: {mean: 50, std: 5, min: 20}, prefix_tokens: 8,\n"
        "                 output_tokens: {mean: 16}, tokenizer: tok}}\n",
    )
    plan = load_plan(p)
    assert plan.prompts[0].synthetic.tokenizer == str(tmp_path / "tok")


@pytest.mark.parametrize(
    "entry,expected",
    [
        ("{source: q.jsonl, format: spec-bench, turns: all}", "turns all is not supported"),
        ("{source: q.jsonl, format: csv}", "key 'prompts.0.format'"),
        ("{source: q.jsonl, turns: some}", "key 'prompts.0.turns'"),
        ("{source: q.jsonl, format: generic}", "format generic needs fields.prompt or fields.messages"),
        ("{source: q.jsonl, format: generic, fields: {prompt: q, segmnt: c}}", "key 'prompts.0.fields.segmnt': unknown key"),
        ("{source: 'synthetic:lengths'}", "synthetic:lengths needs its parameters"),
        (
            "{source: 'synthetic:random', synthetic: {prompt_tokens: {mean: 5}, output_tokens: {mean: 5}}}",
            "apply to synthetic:lengths only",
        ),
        (
            "{source: 'synthetic:lengths', synthetic: {prompt_tokens: {mean: 0}, output_tokens: {mean: 5}}}",
            "key 'prompts.0.synthetic.prompt_tokens.mean'",
        ),
    ],
)
def test_bad_prompt_entries_name_the_key(tmp_path, entry, expected):
    p = plan_file(tmp_path, f"  - {entry}\n")
    with pytest.raises(CheckPlanError) as e:
        load_plan(p)
    assert str(p) in str(e.value) and expected in str(e.value)
