"""Greedy-output equivalence between the embedded baseline and n-gram servers at temperature 0, through a check.

N-gram speculation on vLLM CPU is expected to be lossless at temperature 0, but batching can change the
numerics of either server, so this asserts that the comparison is computed and consistent (the baseline's own
variation measured, token ids used, the warning given exactly when the stated rule says so), not a share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from specguard.check.outputs import EQUIVALENCE_FILE
from specguard.check.plan import load_plan
from specguard.check.report import build_verdict, load_check, write_outputs
from specguard.check.runner import run_check
from specguard.embedded.servers import SERVED_NAME
from specguard.results.models import OUTPUTS_FILE
from specguard.verdict.budget_tests import error_difference_interval

pytestmark = pytest.mark.vllm


def _no_launch(*_: Any) -> Any:
    raise AssertionError("endpoint arms launch nothing")


def test_greedy_outputs_compared_per_segment_with_the_baseline_own_variation(
    vllm_servers: dict[str, Any], tmp_path: Path
) -> None:
    arms = {
        arm: {"endpoint": {"base_url": vllm_servers[key].base_url, "model": SERVED_NAME}}
        for arm, key in (("baseline", "baseline"), ("candidate", "ngram"))
    }
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(
        yaml.safe_dump(
            {
                "arms": arms,
                "traffic": [{"name": "pair", "concurrency": 2, "num_requests": 12, "target": True}],
                "sampling": [{"name": "greedy", "temperature": 0}],
                "prompts": [{"source": "synthetic:mixed", "count": 6}],
                "repetitions": 2,
                "warmup": 1,
                "max_tokens": 24,
                "equivalence": {"guardrail": True, "max_extra_divergence": 0.2},
            }
        )
    )
    out = tmp_path / "check"
    record = run_check(load_plan(plan_path), plan_path, out, launcher=_no_launch, log=lambda _: None)
    v = write_outputs(record, out)
    greedy = [c for c in v.cells if c.equivalence is not None]
    assert greedy and len(greedy) == len(v.cells)
    for c in greedy:
        eq = c.equivalence
        assert eq is not None and eq.unit == "tokens" and eq.note is None  # vLLM 0.32 returns token ids
        # every prompt is sent twice per arm over two repetitions: the baseline's own variation is measured
        assert eq.prompts > 0 and eq.baseline.compared > 0 and eq.candidate.compared >= eq.baseline.compared
        (db, nb), (dc, nc) = (eq.baseline.differing, eq.baseline.compared), (eq.candidate.differing, eq.candidate.compared)
        lo, _ = error_difference_interval((db, nb), (dc, nc))
        warned = any("greedy outputs diverge more" in w and c.name in w for w in v.warnings)
        assert warned == (lo > 0), (eq, v.warnings)
        if dc:
            assert eq.candidate.first_divergence_median is not None
    # the outputs are gone after the verdict; the comparison is stored and a rebuilt report reads it
    assert list(out.rglob(OUTPUTS_FILE)) == [] and (out / EQUIVALENCE_FILE).exists()
    rebuilt = build_verdict(load_check(out), out)
    assert [c.equivalence for c in rebuilt.cells] == [c.equivalence for c in v.cells]
