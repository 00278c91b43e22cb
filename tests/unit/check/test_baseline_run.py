"""check --baseline-run without servers: which run goes to which cell, how a foreign run is stored as the baseline's,
how prompts without text are matched, and that a resumed check must be given the same runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.analysis.compare import prompt_token_difference
from specguard.check.baseline import cells_of_arguments, resolve_baselines, write_baselines
from specguard.check.plan import CheckPlan
from specguard.check.record import CheckState
from specguard.check.runner import resolve_plan, run_check
from specguard.errors import UsageError
from specguard.results.check_dir import CheckDir
from specguard.results.models import RequestRecord
from specguard.results.run_dir import load_run, load_summary
from specguard.results.store import write_json_atomic
from tests.foreign_files import vllm_bench_result

CELL = "steady__greedy__p0"


def plan(**changes: object) -> CheckPlan:
    data: dict[str, object] = {
        "arms": {
            "baseline": {"endpoint": {"base_url": "http://127.0.0.1:9", "model": "scripted"}},
            "candidate": {"endpoint": {"base_url": "http://127.0.0.1:9", "model": "scripted"}},
        },
        "repetitions": 2,
        "warmup": 0,
        "max_tokens": 8,
        "traffic": [{"name": "steady", "concurrency": 4, "num_requests": 10, "target": True}],
        "sampling": [{"name": "greedy", "temperature": 0.0}],
        "prompts": [{"source": "synthetic:random", "count": 8}],
        "objective": {"metric": "tpot_ms"},
    }
    return CheckPlan.model_validate(data | changes)


def bench_file(tmp_path: Path, name: str = "vllm-bench.json", **changes: object) -> Path:
    shape: dict[str, object] = {"n": 10, "ttft_s": 0.05, "itl_s": 0.01, "output_len": 8}
    return vllm_bench_result(tmp_path / name, **(shape | changes))  # type: ignore[arg-type]


def test_a_bare_run_whose_path_holds_an_equals_sign_is_the_one_cells(tmp_path: Path) -> None:
    f = bench_file(tmp_path, "lr=0.1.json")
    assert cells_of_arguments(plan(), [str(f)]) == {CELL: str(f)}
    assert cells_of_arguments(plan(), [f"{CELL}={f}"]) == {CELL: str(f)}


def test_a_foreign_run_is_stored_as_the_baselines_first_repetition_with_the_cells_segment(tmp_path: Path) -> None:
    p = plan()
    resolved = resolve_plan(p, tmp_path / "plan.yaml", [str(bench_file(tmp_path))])
    d = CheckDir(tmp_path / "check")
    write_baselines(d, resolved.baselines)
    run = d.run_dir("baseline", 1, CELL)
    info, records, _ = load_run(run)
    assert info.tool_version.startswith("vllm bench serve") and len(records) == 10
    # the plan's prompts are all of one segment ("random"), the file's requests take it: segments must meet
    assert {r.segment for r in records} == {item.segment for item in resolved.prompt_sets[0].items} == {"random"}
    assert load_summary(run).requests == 10
    assert not (d.root / "runs" / "candidate").exists() and resolved.arms == ("candidate",)
    before = (run / "requests.jsonl").read_bytes()
    write_baselines(d, resolved.baselines)  # a resumed check keeps what it imported
    assert (run / "requests.jsonl").read_bytes() == before


def test_a_foreign_run_cannot_stand_for_a_source_of_several_segments(tmp_path: Path) -> None:
    p = plan(prompts=[{"source": "synthetic:mixed", "count": 8}])
    resolved = resolve_plan(p, tmp_path / "plan.yaml")
    with pytest.raises(UsageError, match="has segments chat, extraction, analysed apart; a vllm-bench file does not record"):
        resolve_baselines(p, resolved.prompt_sets, [str(bench_file(tmp_path))])


def test_the_baseline_arms_api_key_is_not_asked_for_when_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    arms = {
        "baseline": {"endpoint": {"base_url": "http://127.0.0.1:9", "model": "scripted", "api_key_env": "NO_SUCH_KEY"}},
        "candidate": {"endpoint": {"base_url": "http://127.0.0.1:9", "model": "scripted"}},
    }
    p = plan(arms=arms)
    with pytest.raises(UsageError, match="NO_SUCH_KEY"):
        resolve_plan(p, tmp_path / "plan.yaml")
    assert resolve_plan(p, tmp_path / "plan.yaml", [str(bench_file(tmp_path))]).api_keys["baseline"] is None


def records(tokens: list[int]) -> list[RequestRecord]:
    base = {"index": 0, "request_id": "r", "segment": "default", "ok": True, "error": None, "http_status": 200}
    times = {"scheduled_s": 0.0, "sent_s": 0.0, "send_lag_s": 0.0, "ttft_s": 0.01, "e2e_s": 0.02, "stream_end_s": 0.02}
    rest = {"chunk_times_s": [], "chunk_tokens": [], "token_source": None, "output_tokens": 1, "finish_reason": None}
    return [RequestRecord.model_validate(base | times | rest | {"seq": i, "prompt_tokens": t}) for i, t in enumerate(tokens)]


def test_prompts_without_text_match_by_token_counts_in_proportion() -> None:
    # a check's candidate sends the baseline's prompts once per repetition: the same counts, twice over
    assert prompt_token_difference(records([8, 9, 10]), records([10, 9, 8, 8, 9, 10])) == (None, None)
    diff, warn = prompt_token_difference(records([100, 100]), records([101, 100, 100]))
    assert diff is None and warn is not None and "two tokenizations" in warn
    diff, warn = prompt_token_difference(records([100, 100]), records([500, 500]))
    assert diff is not None and "not the same prompts" in diff and warn is None


def test_a_resumed_check_must_be_given_the_same_baseline_runs(tmp_path: Path) -> None:
    p = plan()
    first, other = bench_file(tmp_path), bench_file(tmp_path, "other.json", ttft_s=0.06)
    out = tmp_path / "check"
    out.mkdir()
    resolved = resolve_plan(p, tmp_path / "plan.yaml", [str(first)])
    done = ["candidate rep1", "candidate rep2"]  # nothing left to measure: the resume sends nothing
    write_json_atomic(CheckDir(out).state_json, CheckState(plan_sha256=resolved.sha256, blocks=done, done=done))

    def no_launcher(*_: object) -> object:
        raise AssertionError("no server is launched")

    for given in ([str(other)], []):
        with pytest.raises(UsageError, match="--baseline-run runs\\) changed"):
            run_check(p, tmp_path / "plan.yaml", out, launcher=no_launcher, resume=True, baseline_runs=given, log=lambda _: None)  # type: ignore[arg-type]
    record = run_check(
        p, tmp_path / "plan.yaml", out, launcher=no_launcher, resume=True, baseline_runs=[str(first)], log=lambda _: None
    )  # type: ignore[arg-type]
    assert [(b.cell, b.format, b.source) for b in record.baseline_imports] == [(CELL, "vllm-bench", str(first.resolve()))]
    assert CheckDir(out).has_summary("baseline", 1, CELL)
