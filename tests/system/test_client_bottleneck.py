"""The client warns when it stamps reads late: a busy event loop against the scripted server, and an idle one.

The loaded client runs a planted busy callback on its timing loop (80 ms of work in every 100 ms); the
warning must name the read-stamp lag, and the scripted server's own write times show the stamps late.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.results.models import LoadShape, Summary
from specguard.results.run_dir import load_run

BUSY_S = 0.08  # planted, per 100 ms: 16x the warning's 5 ms limit


def bench(scripted, out: Path, busy: bool) -> tuple[Summary, list[float]]:
    server = scripted(ttft_ms=20, interval_ms=10, chunks=10, tokens_pattern=[1])
    cfg = BenchConfig(
        base_url=server.base_url,
        model="scripted",
        prompts=synthetic_prompts("random", count=8),
        load=LoadShape(kind="constant", rate=20, num_requests=20),
        metrics_url=None,
        out_dir=out,
    )

    async def main() -> Summary:
        async def hog() -> None:
            while True:
                await asyncio.sleep(0.02)
                time.sleep(BUSY_S)

        hogging = asyncio.create_task(hog()) if busy else None
        try:
            return await run_bench(cfg)
        finally:
            if hogging is not None:
                hogging.cancel()

    summary = run_async(main())
    info, records, _ = load_run(out)
    truth = server.chunk_logs()
    first_err = [info.started_monotonic + r.sent_s + r.chunk_times_s[0] - truth[r.request_id].chunk_sent[0] for r in records]
    return summary, first_err


def read_warnings(summary: Summary) -> list[str]:
    return [w for w in summary.warnings if "read-stamp lag" in w]


def test_a_busy_client_warns_that_its_stamps_are_late(scripted, tmp_path: Path) -> None:
    summary, first_err = bench(scripted, tmp_path / "busy", busy=True)
    assert read_warnings(summary), summary.warnings
    assert summary.read_lag_ms is not None and summary.read_lag_ms.max is not None
    # the server's own write times agree: some first chunks were stamped a planted-stall's order late
    assert max(first_err) > BUSY_S / 4


def test_an_idle_client_does_not(scripted, tmp_path: Path) -> None:
    summary, _ = bench(scripted, tmp_path / "idle", busy=False)
    assert summary.read_lag_ms is not None and summary.read_lag_ms.count > 0
    assert read_warnings(summary) == [], summary.warnings
