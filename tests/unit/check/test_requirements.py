"""A plan that cannot reach GO says so when loaded, and what each percentile needs."""

from pathlib import Path

from specguard.check.plan import CheckPlan, load_plan
from specguard.check.requirements import plan_requirements, plan_warnings

DEMO = Path(__file__).parents[3] / "src/specguard/check/plans/demo.yaml"


def plan(num_requests: int, repetitions: int = 3, min_tail: int = 5) -> CheckPlan:
    return CheckPlan.model_validate(
        {
            "arms": {
                "baseline": {"endpoint": {"base_url": "http://a:1", "model": "m"}},
                "candidate": {"endpoint": {"base_url": "http://b:1", "model": "m"}},
            },
            "traffic": [{"name": "steady", "rate": 2, "num_requests": num_requests, "target": True}],
            "sampling": [{"name": "greedy", "temperature": 0}],
            "prompts": [{"source": "synthetic:short"}],
            "repetitions": repetitions,
            "statistics": {"min_tail_samples": min_tail},
        }
    )


def test_p99_guardrails_short_of_the_tail_rule_warn():
    (req,) = plan_requirements(plan(100))
    assert req.planned == 300 and req.objective == 100 and req.guardrails == {"P99 E2E": 500, "P99 TTFT": 500}
    (warning,) = plan_warnings(plan(100))
    assert "cannot reach GO" in warning and "P99 TTFT" in warning and "objective" not in warning
    assert plan_warnings(plan(200)) == []
    # the plan's statistics block changes the rule
    assert plan_warnings(plan(100, min_tail=2)) == [] and plan_requirements(plan(100, min_tail=2))[0].needed == 200


def test_the_demo_plan_is_flagged():
    assert plan_warnings(load_plan(DEMO))
