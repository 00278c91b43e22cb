"""The read probe samples in wall time: a loop blocked for a long stretch shows as many late samples, not one."""

import asyncio
import time

from specguard.analysis.client_stalls import STALL_THRESHOLD_S
from specguard.loadgen.read_probe import ReadLagProbe

BLOCK_S = 0.3  # planted: 30 probe periods, 15x the stall threshold


async def probe_for(block_s: float) -> ReadLagProbe:
    probe = ReadLagProbe(t0=time.monotonic())
    await probe.start()
    try:
        await asyncio.sleep(0.1)
        time.sleep(block_s)  # the loop is busy: nothing is read, the writer thread keeps writing
        await asyncio.sleep(0.1)
    finally:
        probe.stop()
    return probe


def test_a_blocked_loop_gives_late_samples_and_a_stall():
    probe = asyncio.run(probe_for(BLOCK_S))
    late = [lag for lag in probe.lags if lag >= STALL_THRESHOLD_S]
    assert max(probe.lags) >= BLOCK_S / 2
    assert len(late) >= 2  # one per period written while the loop was blocked, not one per stall
    assert probe.stalls and all(b > a for a, b in probe.stalls)


def test_an_idle_loop_has_no_planted_size_lag():
    probe = asyncio.run(probe_for(0.0))
    assert probe.lags and max(probe.lags) < BLOCK_S / 2
