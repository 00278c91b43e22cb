"""Plan arms' headers and extra_body, and plan labels: validated when the plan is loaded."""

import pytest
from pydantic import ValidationError

from specguard.check.plan import CheckPlan


def plan(**arm_extra: object) -> dict[str, object]:
    return {
        "arms": {
            "baseline": {"endpoint": {"base_url": "http://a:1", "model": "m"}, **arm_extra},
            "candidate": {"endpoint": {"base_url": "http://b:1", "model": "m"}},
        },
        "traffic": [{"name": "steady", "rate": 2, "num_requests": 10, "target": True}],
        "sampling": [{"name": "greedy", "temperature": 0}],
        "prompts": [{"source": "synthetic:short"}],
        "labels": {"team": "infra"},
    }


def test_headers_extra_body_and_labels_are_kept():
    p = CheckPlan.model_validate(plan(headers={"X-Tenant": "a"}, extra_body={"chat_template_kwargs": {"thinking": False}}))
    assert p.arms.baseline.headers == {"X-Tenant": "a"}
    assert p.arms.baseline.extra_body == {"chat_template_kwargs": {"thinking": False}}
    assert p.labels == {"team": "infra"}


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"headers": {"Authorization": "Bearer x"}}, "look like credentials"),
        ({"headers": {"bad name": "x"}}, "HTTP header name"),
        ({"headers": {"X-Request-Id": "x"}}, "sets X-Request-Id itself"),
        ({"extra_body": {"stream": False}}, "cannot be overridden"),
        # the same rules as bench's --header and --extra-body (one parser): no header injection, no max_tokens 0
        ({"headers": {"X-A": "b\r\nX-Injected: 1"}}, "the value holds the control character"),
        ({"extra_body": {"max_tokens": 0}}, "extra_body: key 'max_tokens': Input should be greater than or equal to 1"),
    ],
)
def test_bad_extras_are_refused(extra, fragment):
    with pytest.raises(ValidationError, match=fragment):
        CheckPlan.model_validate(plan(**extra))
