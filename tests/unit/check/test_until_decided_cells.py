"""check --until-decided repeats only what is undecided: a level-wide test all its samplings, an objective its own."""

import pytest

from specguard.check.plan import CheckPlan
from specguard.check.until_decided import _undecided_cells, check_until_decided_plan
from specguard.errors import UsageError
from specguard.verdict.model import Undecided


def plan(sequential: bool = True) -> CheckPlan:
    return CheckPlan.model_validate(
        {
            "arms": {
                "baseline": {"endpoint": {"base_url": "http://a:1", "model": "m"}},
                "candidate": {"endpoint": {"base_url": "http://b:1", "model": "m"}},
            },
            "traffic": [
                {"name": "steady", "rate": 4, "num_requests": 40, "target": True},
                {"name": "burst", "rate": 16, "num_requests": 40},
            ],
            "sampling": [{"name": "greedy", "temperature": 0}, {"name": "hot", "temperature": 1}],
            "prompts": [{"source": "synthetic:short"}, {"source": "synthetic:random"}],
            **({"sequential": {"max_requests_per_arm": 1000}} if sequential else {}),
        }
    )


def test_an_objective_undecided_at_one_sampling_repeats_that_sampling_and_a_level_test_the_whole_level():
    cells = _undecided_cells(plan(), [Undecided(traffic="steady", sampling="hot"), Undecided(traffic="burst")], 2)
    assert cells == [
        "steady__hot__p0",
        "steady__hot__p1",
        "burst__greedy__p0",
        "burst__greedy__p1",
        "burst__hot__p0",
        "burst__hot__p1",
    ]


def test_a_plan_without_a_sequential_block_is_refused():
    check_until_decided_plan(plan())
    with pytest.raises(UsageError, match="needs the plan's sequential: block"):
        check_until_decided_plan(plan(sequential=False))
