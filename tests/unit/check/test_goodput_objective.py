"""Goodput as a check's objective: stored runs -> per-cell goodput ratio -> a GO that reads a rise as the gain."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.analysis.summarize import summarize
from specguard.check.aggregate import cell_comparisons
from specguard.check.plan import load_plan
from specguard.results.check_dir import CheckDir, cell_key
from specguard.results.models import LoadShape, RequestRecord, RunInfo, SamplingOverrides, Slo
from specguard.results.store import JsonlAppender, write_json_atomic
from specguard.verdict import decide
from tests.unit.check.test_check_plan import BASE

SLO = Slo(ttft_ms=500)


def request(i: int, late: bool) -> RequestRecord:
    """Request i, sent at i / 10 s; a late one has its first token at 900 ms (over the SLO), the rest at 100 ms."""
    ttft = 0.9 if late else 0.1
    times = [ttft + k * 0.01 for k in range(8)]
    return RequestRecord(
        index=i,
        seq=i,
        request_id=f"r{i}",
        segment="default",
        ok=True,
        error=None,
        http_status=200,
        scheduled_s=i / 10,
        sent_s=i / 10,
        send_lag_s=0.0,
        ttft_s=times[0],
        e2e_s=times[-1],
        stream_end_s=times[-1],
        chunk_times_s=times,
        chunk_tokens=[1] * 8,
        token_source="server_usage",
        prompt_tokens=4,
        output_tokens=8,
        finish_reason="length",
    )


def write_run(d: Path, late_every: int, n: int) -> None:
    d.mkdir(parents=True)
    records = [request(i, i % late_every == 0) for i in range(n)]
    info = RunInfo(
        tool_version="0",
        base_url="http://127.0.0.1:9",
        api="completions",
        model="m",
        metrics_url=None,
        prompt_source="synthetic:random",
        prompt_count=n,
        load=LoadShape(kind="constant", rate=10, num_requests=n),
        sampling=SamplingOverrides(temperature=0),
        started_unix=0.0,
        started_monotonic=0.0,
        slo=SLO,
    )
    write_json_atomic(d / "run.json", info)
    appender = JsonlAppender(d / "requests.jsonl")
    appender.append_many(records, sync=False)
    appender.close()
    write_json_atomic(d / "summary.json", summarize(records, [], slo=SLO))


@pytest.mark.parametrize("candidate_late_every", [10, 2])
def test_goodput_objective_goes_up_for_a_go(tmp_path: Path, candidate_late_every: int) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(
        BASE + "slo: {ttft_ms: 500}\nobjective: {metric: goodput, min_improvement: 0.05}\nstatistics: {resamples: 300}\n"
    )
    plan = load_plan(plan_file)
    out = tmp_path / "check"
    key = cell_key("steady", "t0", 0)
    for rep in range(1, plan.repetitions + 1):
        write_run(CheckDir(out).run_dir("baseline", rep, key), late_every=4, n=400)  # 3 in 4 meet the SLO
        write_run(CheckDir(out).run_dir("candidate", rep, key), late_every=candidate_late_every, n=400)
    [cell] = cell_comparisons(plan, out)
    assert cell.objective is cell.metrics["goodput"]["rate"]
    better = candidate_late_every == 10  # 9 in 10 meet it; one in 2 is worse than the baseline
    assert (cell.objective.ratio > 1) is better
    verdict = decide([cell], plan.objective, plan.guardrails)
    assert (verdict.verdict == "GO") is better, verdict.reasons
    if not better:
        assert verdict.verdict == "NO-GO"
