"""A check's outputs: compared from outputs.jsonl, the result stored, the outputs deleted after the verdict unless kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.check.outputs import cell_equivalence, forget_outputs, greedy_cells
from specguard.check.plan import CheckPlan
from specguard.results.check_dir import CheckDir, cell_key
from specguard.results.models import OutputRecord, RequestRecord
from specguard.results.run_dir import RunDir
from specguard.results.store import JsonlAppender

PLAN = {
    "arms": {
        "baseline": {"endpoint": {"base_url": "http://127.0.0.1:9", "model": "m"}},
        "candidate": {"endpoint": {"base_url": "http://127.0.0.1:9", "model": "m"}},
    },
    "traffic": [{"name": "idle", "concurrency": 1, "num_requests": 2, "target": True}],
    "sampling": [{"name": "greedy", "temperature": 0}, {"name": "hot", "temperature": 1}],
    "prompts": [{"source": "synthetic:random"}],
    "repetitions": 2,
}


def write_run(run_dir: Path, outputs: list[list[int]]) -> None:
    run_dir.mkdir(parents=True)
    recs = JsonlAppender(run_dir / "requests.jsonl")
    outs = JsonlAppender(run_dir / RunDir.OUTPUTS)
    for seq, ids in enumerate(outputs):
        recs.append(
            RequestRecord(
                index=seq,
                seq=seq,
                request_id=str(seq),
                segment="chat",
                ok=True,
                error=None,
                http_status=200,
                scheduled_s=0,
                sent_s=0,
                send_lag_s=0,
                ttft_s=0.1,
                e2e_s=0.2,
                stream_end_s=0.2,
                chunk_times_s=[0.1],
                chunk_tokens=[len(ids)],
                token_source="server_usage",
                prompt_tokens=3,
                output_tokens=len(ids),
                finish_reason="length",
                item=seq,
            )
        )
        outs.append(OutputRecord(seq=seq, item=seq, token_ids=ids))
    recs.close()
    outs.close()
    (run_dir / "summary.json").write_text("{}")  # measured_runs only asks that it exists


def test_comparison_is_stored_and_the_outputs_deleted_after_the_verdict(tmp_path: Path) -> None:
    plan = CheckPlan.model_validate(PLAN)
    assert greedy_cells(plan) == [cell_key("idle", "greedy", 0)]
    key = greedy_cells(plan)[0]
    d = CheckDir(tmp_path)
    for rep in (1, 2):
        write_run(d.run_dir("baseline", rep, key), [[1, 2, 3], [4, 5, 6]])
        write_run(d.run_dir("candidate", rep, key), [[1, 2, 3], [4, 5, 9] if rep == 2 else [4, 5, 6]])
    live = cell_equivalence(plan, tmp_path, key)
    assert live is not None and live["chat"].candidate.differing == 1 and live["chat"].baseline.compared == 2
    forget_outputs(plan, tmp_path)
    assert list(tmp_path.rglob(RunDir.OUTPUTS)) == [] and CheckDir(tmp_path).equivalence_json.exists()
    assert cell_equivalence(plan, tmp_path, key) == live  # a report rebuilt later reads the stored result


def test_keep_output_keeps_the_outputs(tmp_path: Path) -> None:
    plan = CheckPlan.model_validate(PLAN | {"keep_output": True})
    key = greedy_cells(plan)[0]
    write_run(CheckDir(tmp_path).run_dir("baseline", 1, key), [[1]])
    forget_outputs(plan, tmp_path)
    assert len(list(tmp_path.rglob(RunDir.OUTPUTS))) == 1


def test_plan_keys_for_equivalence_and_the_goodput_guardrail() -> None:
    plan = CheckPlan.model_validate(PLAN | {"equivalence": {"guardrail": True, "max_extra_divergence": 0.02}})
    assert plan.equivalence.guardrail and plan.equivalence.max_extra_divergence == 0.02
    assert plan.guardrails.max_goodput_drop is None and not plan.keep_output
    with pytest.raises(ValueError, match="max_goodput_drop needs 'slo:'"):
        CheckPlan.model_validate(PLAN | {"guardrails": {"max_goodput_drop": 0.1}})
    with_slo = CheckPlan.model_validate(PLAN | {"guardrails": {"max_goodput_drop": 0.1}, "slo": {"ttft_ms": 500}})
    assert with_slo.guardrails.max_goodput_drop == 0.1
    with pytest.raises(ValueError, match="max_extra_divergence"):
        CheckPlan.model_validate(PLAN | {"equivalence": {"max_extra_divergence": 2}})
