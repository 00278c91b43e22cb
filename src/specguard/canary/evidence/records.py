"""The evidence of ``engine: proxy``: the proxy's record of every request, and the pools' ``/metrics`` gauges."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from specguard.canary.evidence.base import WindowEvidence
from specguard.canary.evidence.pool_watch import PoolWatcher, window_gauges
from specguard.canary.judge.decision import CriticalEvent
from specguard.canary.judge.policy import judge_records
from specguard.canary.judge.window import AnalysisPolicy
from specguard.canary.spec.rollout import Rollout
from specguard.canary.state.records import ProxiedRequest

__all__ = ["JUDGE_SWITCH_INTERVAL_S", "RecordsEvidence"]

JUDGE_SWITCH_INTERVAL_S = 0.001  # the GIL switch interval while a window is judged in its worker thread


class RecordsEvidence:
    """``EvidenceSource`` on the proxy's records; the watcher's reads give the gauges and the crashes."""

    def __init__(self, rollout: Rollout, policy: AnalysisPolicy, watcher: PoolWatcher) -> None:
        self.rollout = rollout
        self.policy = policy
        self.watcher = watcher

    async def begin(self, at: float) -> None:
        pass  # the proxy's records carry their own times

    async def read(self) -> list[CriticalEvent]:
        return await self.watcher.read_all()

    async def judge(
        self, records: Sequence[ProxiedRequest], start: float, end: float, look: int, *, has_control: bool, percent: float
    ) -> WindowEvidence:
        gauges, acceptance = window_gauges(self.watcher.take_window())
        # Off the relay loop: the records are handed over (this window's list is no longer appended to). While the
        # judge thread runs, the GIL is handed back every 1 ms instead of Python's 5: a relay callback waits at most
        # that long for it (tests/system/test_canary_relay_timing.py holds the p99.9 chunk gap to it).
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, JUDGE_SWITCH_INTERVAL_S))
        try:
            analysis = await asyncio.to_thread(
                judge_records, self.rollout, self.policy, records, gauges, look, with_control=has_control, percent=percent
            )
        finally:
            sys.setswitchinterval(switch)
        return WindowEvidence(analysis=analysis, gauges=gauges, acceptance=acceptance)

    async def close(self) -> None:
        await self.watcher.close()
