"""`specguard check --baseline-run`: a run that is missing, unreadable, for no cell of the plan, or of another
workload than its cell is exit 2 before anything is sent or written; so is a cell left without a baseline.

The plan's arms are endpoints at a dead port and the guard refuses any traffic: every case must stop at
validation, its one error line naming the problem (the file, the cell, what differs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import USAGE, Cli, make_run, plan_data, write_plan
from tests.foreign_files import guidellm_report, vllm_bench_result

CELL = "steady__greedy__p0"


def check(plan: Path, out: Path, *runs: str) -> list[str]:
    return ["check", str(plan), "--out", str(out), *[a for r in runs for a in ("--baseline-run", r)]]


def matching_file(tmp_path: Path, **changes: Any) -> Path:
    """A vllm bench result of the plan's one cell: poisson at 4 requests/s, 2 requests of up to 64 tokens."""
    shape: dict[str, Any] = {"n": 2, "ttft_s": 0.05, "itl_s": 0.01, "output_len": 4, "rate": 4.0, "max_concurrency": None}
    return vllm_bench_result(tmp_path / "vllm-bench.json", **(shape | changes))


def two_cell_plan(tmp_path: Path) -> Path:
    data = plan_data()
    data["sampling"].append({"name": "warm", "temperature": 0.7})
    return write_plan(tmp_path / "plan.yaml", data)


def test_a_missing_run_is_named(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    missing = tmp_path / "nope.json"
    cli.fails(check(plan, tmp_path / "out", str(missing)), USAGE, f"{missing}: run directory not found")


def test_a_file_that_is_no_result_is_named_with_what_was_expected(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cli.fails(check(plan, tmp_path / "out", str(bad)), USAGE, f"{bad}: not a directory, nor a result file (line 1: not JSON")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": []}))
    cli.fails(check(plan, tmp_path / "out", str(other)), USAGE, "nor a vllm bench serve --save-detailed result")


def test_an_unknown_cell_is_named_with_the_plans_cells(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    run = matching_file(tmp_path)
    cli.fails(
        check(plan, tmp_path / "out", f"busy__greedy__p0={run}"),
        USAGE,
        f"no cell 'busy__greedy__p0' in the plan; its cells: {CELL}",
    )


def test_every_cell_needs_a_baseline_run(cli: Cli, tmp_path: Path) -> None:
    plan = two_cell_plan(tmp_path)
    run = matching_file(tmp_path)
    cli.fails(
        check(plan, tmp_path / "out", f"{CELL}={run}"), USAGE, "1 of the plan's 2 cells have no baseline run: steady__warm__p0"
    )


def test_a_bare_run_needs_a_plan_of_one_cell(cli: Cli, tmp_path: Path) -> None:
    plan = two_cell_plan(tmp_path)
    run = matching_file(tmp_path)
    cli.fails(check(plan, tmp_path / "out", str(run)), USAGE, "the plan has 2 cells; name the cell of each run as CELL=RUN")


def test_two_runs_for_one_cell_are_refused(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    run = matching_file(tmp_path)
    cli.fails(check(plan, tmp_path / "out", str(run), f"{CELL}={run}"), USAGE, f"two runs for cell {CELL}")


def bench_run(tmp_path: Path, generator: dict[str, str | int]) -> Path:
    """A finished `bench` run of the plan's one cell, but for its prompts: a synthetic set made by ``generator``."""
    from specguard.analysis.summarize import summarize
    from specguard.results.models import LoadShape, RunInfo, SamplingOverrides
    from specguard.results.run_dir import load_run
    from specguard.results.store import write_json_atomic

    run = make_run(tmp_path / "run", n=2)
    info, records, _ = load_run(run)
    info = info.model_copy(
        update={
            "prompt_generator": generator,
            "prompt_count": 2,
            "load": LoadShape(kind="poisson", rate=4.0, num_requests=2),
            "sampling": SamplingOverrides(temperature=0.0, max_tokens=64),
        }
    )
    RunInfo.model_validate(info.model_dump())
    write_json_atomic(run / "run.json", info)
    write_json_atomic(run / "summary.json", summarize(records, []))
    return run


def test_a_bench_run_of_other_prompts_is_refused_by_content(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")  # prompts: synthetic:random, 2 items, seed 0
    run = bench_run(tmp_path, {"set": "random", "count": 2, "seed": 7, "max_tokens": 64})
    r = cli.fails(check(plan, tmp_path / "out", str(run)), USAGE, f"cell {CELL}, run {run}: prompt generator")
    assert "'seed': 7" in r.stderr and "load." not in r.stderr and "sampling" not in r.stderr


def test_a_bench_run_of_the_same_prompts_is_not_refused_for_them(cli: Cli, tmp_path: Path) -> None:
    """The generator's max_tokens (each item's default; bench's sets keep 64) is no part of the prompts' content."""
    plan = write_plan(tmp_path / "plan.yaml", plan_data() | {"max_tokens": 16})
    run = bench_run(tmp_path, {"set": "random", "count": 2, "seed": 0, "max_tokens": 64})
    r = cli.fails(check(plan, tmp_path / "out", str(run)), USAGE, "sampling.max_tokens: 64 in the run, 16 in the cell")
    assert "prompt" not in r.stderr.split("error:")[1]


def test_a_foreign_file_of_another_load_is_refused(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    run = matching_file(tmp_path, rate=8.0)
    cli.fails(check(plan, tmp_path / "out", str(run)), USAGE, "load.rate: 8.0 in the run, 4.0 in the cell")


def test_a_foreign_file_with_longer_outputs_than_max_tokens_is_refused(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    run = matching_file(tmp_path, output_len=100)
    cli.fails(
        check(plan, tmp_path / "out", str(run)), USAGE, "a request of the run produced 100 tokens, the plan's max_tokens is 64"
    )


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"objective": {"metric": "output_tokens_per_s"}}, "an imported baseline is one run, so it has no interval"),
        (
            {"traffic": {"sweep": {"num_requests": 4, "max_concurrency": 2, "rates": 2}}},
            "a sweep plan chooses its rates from the baseline while it runs",
        ),
    ],
)
def test_what_an_imported_baseline_cannot_give_is_refused(
    cli: Cli, tmp_path: Path, change: dict[str, Any], fragment: str
) -> None:
    plan = write_plan(tmp_path / "plan.yaml", plan_data() | change)
    run = matching_file(tmp_path)
    cli.fails(check(plan, tmp_path / "out", str(run)), USAGE, fragment)


def test_a_guidellm_file_cannot_decide_on_per_token_itl(cli: Cli, tmp_path: Path) -> None:
    data = plan_data() | {"traffic": [{"name": "steady", "concurrency": 4, "num_requests": 20, "target": True}]}
    plan = write_plan(tmp_path / "plan.yaml", data)  # the objective: p95 itl_ms, the default
    run = guidellm_report(tmp_path / "benchmarks.json", n=20, ttft_ms=40.0, itl_ms=5.0, output_tokens=8)
    cli.fails(
        check(plan, tmp_path / "out", str(run)),
        USAGE,
        "the objective itl_ms needs per-token ITL and no request of this guidellm run",
    )


def test_a_dry_run_checks_the_cells_named_and_counts_the_candidate_only(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    run = matching_file(tmp_path)
    cli.fails(check(plan, tmp_path / "out", f"busy__greedy__p0={run}") + ["--dry-run"], USAGE, "no cell 'busy__greedy__p0'")
    r = cli.ok(check(plan, tmp_path / "out", f"{CELL}={run}") + ["--dry-run"], 0)
    assert "requests over the candidate (the baseline is imported, not measured)" in r.stdout
