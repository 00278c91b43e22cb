"""Issue 26 point 5: a window's analysis runs in a worker thread, so the loop that relays streams keeps turning.

No wall-clock threshold: the same window's analysis is run twice in this test, once on the loop (the old way,
the control) and once through ``asyncio.to_thread`` as the controller does, while a ticker on the loop records
its largest gap between 1 ms sleeps. On the loop the ticker stalls for the whole analysis; off it, the loop
gets the GIL back at Python's switch interval (5 ms), so its largest gap is a small fraction of the control's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np

from specguard.canary.judge.policy import analysis_policy, judge_records
from specguard.canary.spec.rollout import load_rollout
from specguard.canary.state.records import ProxiedRequest

ROOT = Path(__file__).resolve().parents[3]


def records(n: int, seed: int) -> list[ProxiedRequest]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        gaps = np.cumsum(rng.lognormal(np.log(0.02), 0.3, 32))
        out.append(
            ProxiedRequest.model_construct(
                seq=i, request_id=f"r{i}", attempt=1, retried=False, received_unix=1.0, pool=("baseline", "candidate")[i % 2],
                server="http://127.0.0.1:1", step=0, candidate_weight=0.5, segment="m", api="completions", stream=True,
                in_flight=int(rng.integers(0, 8)), ok=True, error=None, http_status=200, ttft_s=float(gaps[0]),
                e2e_s=float(gaps[-1]), stream_end_s=float(gaps[-1]), chunk_times_s=gaps.tolist(), chunk_tokens=[1] * 32,
                token_source="server_usage", prompt_tokens=5, output_tokens=32, finish_reason="length",
                client_disconnected=False,
            )
        )  # fmt: skip
    return out


async def _largest_gap_while(judge: object) -> float:
    stop = asyncio.Event()
    largest = 0.0

    async def ticker() -> None:
        nonlocal largest
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            largest = max(largest, now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    await judge()  # type: ignore[operator]
    stop.set()
    await task
    return largest


def test_the_analysis_leaves_the_relay_loop_free() -> None:
    rollout = load_rollout(ROOT / "examples" / "rollout-embedded.yaml")
    policy = analysis_policy(rollout)
    window = records(400, seed=5)
    gauges: dict[str, dict[str, float]] = {}

    async def on_loop() -> None:
        judge_records(rollout, policy, window, gauges, 1, with_control=False, percent=50)

    async def off_loop() -> None:
        await asyncio.to_thread(judge_records, rollout, policy, window, gauges, 1, with_control=False, percent=50)

    blocked = asyncio.run(_largest_gap_while(on_loop))
    free = asyncio.run(_largest_gap_while(off_loop))
    # The control stalls the loop for the whole analysis (3.3 s measured for 1,000 records, default resamples);
    # off the loop the largest stall measured 58 ms on 2 busy shared cores (GIL hand-over), 56x less; the bound
    # of 4x leaves room for a noisier machine.
    assert free < blocked / 4, (free, blocked)
