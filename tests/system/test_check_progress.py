"""What a check tells its progress, on two scripted (fake vLLM) servers run as child processes: every block, run
and request, in order.

The system tier (the scripted servers are processes); how progress is drawn, and when it is off, is in
tests/unit/report/test_progress.py.
"""

from __future__ import annotations

from pathlib import Path

from specguard.check.plan import CheckPlan
from specguard.check.runner import run_check
from specguard.loadgen.recorder import RecordWritten
from specguard.loadgen.runner import MatrixProgress


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
