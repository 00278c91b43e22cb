"""The pools' own view: each server's ``/metrics`` read during every window, and the critical conditions.

Per window and pool: the mean over servers and reads of waiting and running requests and KV-cache usage,
the window's preemptions and spec-decode acceptance (counter deltas from the first to the last read), and
server failures. A candidate server that answered before and now refuses the connection has crashed (an
OOM kills vLLM's engine and then its API server; from outside both are a crash); one whose counters went
backwards has restarted. Both are critical: the rollout rolls back at once.

Parsing a vLLM metrics page takes milliseconds of pure Python (``server_metrics/scraper.py``); it runs in
a worker thread so that the proxy's event loop keeps stamping chunk arrivals meanwhile.

Bursts of 5xx answers and of broken streams come from the proxy's records, not from ``/metrics``:
``BurstDetector`` counts them in a sliding window.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from specguard.canary.judge.decision import CriticalEvent
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.vocabulary import PoolName
from specguard.results.models import MetricsSample
from specguard.server_metrics.parse import MetricsParseError, acceptance, counter_delta, parse_metrics_text

__all__ = ["BurstDetector", "PoolReadings", "PoolWatcher", "server_failures", "window_gauges"]

# Gauges averaged per server over a window; counters differenced over it.
_GAUGES = ("requests_waiting", "requests_running", "kv_cache_usage")
# A counter that falls between two reads means the server restarted (vLLM's counters start at 0).
_RESTART_COUNTERS = ("generation_tokens", "prompt_tokens")


@dataclass
class PoolReadings:
    """One window's reads: per server, in order."""

    by_server: dict[str, list[MetricsSample]] = field(default_factory=dict)


async def _read(session: aiohttp.ClientSession, url: str, timeout_s: float) -> MetricsSample:
    t = time.time()
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url) as resp:
                text = await resp.text(errors="replace")
                if resp.status != 200:
                    raise MetricsParseError(f"HTTP {resp.status}")
        return await asyncio.to_thread(parse_metrics_text, text, t, "during")
    except (aiohttp.ClientError, OSError, TimeoutError, MetricsParseError) as exc:
        return MetricsSample(t_s=t, phase="during", ok=False, error=f"{type(exc).__name__}: {exc}")


class PoolWatcher:
    """Reads every server's ``/metrics``; keeps the current window's reads and each server's last good read."""

    def __init__(self, pools: Mapping[PoolName, Sequence[Upstream]], timeout_s: float = 5.0) -> None:
        self.pools = pools
        self.timeout_s = timeout_s
        self.window: dict[PoolName, PoolReadings] = {p: PoolReadings() for p in pools}
        self.last_good: dict[str, MetricsSample] = {}
        self._session: aiohttp.ClientSession | None = None

    async def read_all(self) -> list[CriticalEvent]:
        """One read of every server; the critical conditions it reveals (crashes and restarts of candidate servers)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        targets = [(pool, u) for pool, ups in self.pools.items() for u in ups]
        samples = await asyncio.gather(*(_read(self._session, u.metrics_url, self.timeout_s) for _, u in targets))
        events: list[CriticalEvent] = []
        for (pool, u), sample in zip(targets, samples, strict=True):
            previous = self.last_good.get(u.base_url)
            self.window[pool].by_server.setdefault(u.base_url, []).append(sample)
            if pool == "candidate":
                events.extend(server_failures(u.base_url, previous, sample))
            if sample.ok:
                self.last_good[u.base_url] = sample
        return events

    def take_window(self) -> dict[PoolName, PoolReadings]:
        """This window's reads, and a fresh window that starts from each server's latest read."""
        done = self.window
        self.window = {p: PoolReadings() for p in self.pools}
        for pool, readings in done.items():
            for server, samples in readings.by_server.items():
                good = [s for s in samples if s.ok]
                if good:
                    self.window[pool].by_server[server] = [good[-1]]
        return done

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def server_failures(server: str, previous: MetricsSample | None, now: MetricsSample) -> list[CriticalEvent]:
    """A crash (answered before, cannot be reached now) or a restart (counters went backwards). Pure."""
    if previous is None:
        return []
    if not now.ok:
        refused = now.error is not None and ("Connect" in now.error or "Connection" in now.error or "refused" in now.error)
        if refused:
            return [CriticalEvent(kind="crash", server=server, detail=f"/metrics no longer answers ({now.error})")]
        return []
    for name in _RESTART_COUNTERS:
        delta = counter_delta(previous, now, name)
        if delta is not None and delta < 0:
            return [
                CriticalEvent(
                    kind="crash",
                    server=server,
                    detail=f"restarted: {name} fell from {previous.counters[name]:g} to {now.counters[name]:g}",
                )
            ]
    return []


def window_gauges(readings: Mapping[PoolName, PoolReadings]) -> tuple[dict[str, dict[str, float]], dict[str, float | None]]:
    """Per pool: the mean per server of each gauge, the window's preemptions, and the spec-decode acceptance rate.

    Acceptance is pooled over the pool's servers (accepted / draft tokens of all of them); None without
    spec-decode counters or drafts.
    """
    gauges: dict[str, dict[str, float]] = {}
    rates: dict[str, float | None] = {}
    for pool, r in readings.items():
        per_gauge: dict[str, list[float]] = {}
        preemptions = 0.0
        accepted = drafted = 0.0
        for samples in r.by_server.values():
            good = [s for s in samples if s.ok]
            for s in good:
                for g in _GAUGES:
                    if g in s.gauges:
                        per_gauge.setdefault(g, []).append(s.gauges[g])
            if len(good) >= 2:
                preemptions += counter_delta(good[0], good[-1], "preemptions") or 0.0
                acc = acceptance(good[0], good[-1])
                if acc is not None:
                    accepted += acc.accepted_tokens
                    drafted += acc.draft_tokens
        gauges[pool] = {g: sum(v) / len(v) for g, v in per_gauge.items() if v}
        if any(len([s for s in samples if s.ok]) >= 2 for samples in r.by_server.values()):
            gauges[pool]["preemptions"] = preemptions
        rates[pool] = accepted / drafted if drafted > 0 else None
    return gauges, rates


class BurstDetector:
    """At least ``count`` events within ``within_s`` seconds; pure apart from the times it is given."""

    def __init__(self, count: int, within_s: float) -> None:
        self.count = count
        self.within_s = within_s
        self._times: deque[float] = deque()

    def add(self, t: float) -> bool:
        """Note one event at time ``t``; whether the burst threshold is now reached."""
        self._times.append(t)
        while self._times and self._times[0] < t - self.within_s:
            self._times.popleft()
        return len(self._times) >= self.count

    @property
    def in_window(self) -> int:
        return len(self._times)
