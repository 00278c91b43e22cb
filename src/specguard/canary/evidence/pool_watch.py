"""The pools' own view: each server's ``/metrics`` read during every window, and the critical conditions.

Per window and pool: the mean over servers and reads of waiting and running requests and KV-cache usage,
the window's preemptions and spec-decode acceptance (counter deltas from the first to the last read), and
server failures. A candidate server that answered before and now refuses the connection has crashed (an
OOM kills vLLM's engine and then its API server; from outside both are a crash); one whose counters went
backwards has restarted. Both are critical: the rollout rolls back at once.

The pages are read and parsed by ``scrape.PoolScraper``, the one reader of a pool's pages.

Bursts of 5xx answers and of broken streams come from the proxy's records, not from ``/metrics``:
``BurstDetector`` counts them in a sliding window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specguard.canary.evidence.gauges import pool_gauges
from specguard.canary.evidence.scrape import PageRead, PoolScraper
from specguard.canary.judge.decision import CriticalEvent
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.vocabulary import PoolName
from specguard.results.models import MetricsSample
from specguard.server_metrics.parse import counter_delta

__all__ = ["BurstDetector", "PoolReadings", "PoolWatcher", "server_failures", "window_gauges"]

# A counter that falls between two reads means the server restarted (vLLM's counters start at 0).
_RESTART_COUNTERS = ("generation_tokens", "prompt_tokens")


@dataclass
class PoolReadings:
    """One window's reads: per server, in order."""

    by_server: dict[str, list[MetricsSample]] = field(default_factory=dict)


class PoolWatcher:
    """Watches every server's ``/metrics`` reads; keeps the current window's reads and each server's last good read.

    The reads come from a ``PoolScraper``: its own, or one shared with the scrape metrics source (``observe``).
    """

    def __init__(
        self, pools: Mapping[PoolName, Sequence[Upstream]], timeout_s: float = 5.0, *, scraper: PoolScraper | None = None
    ) -> None:
        self.pools = pools
        self.scraper = scraper if scraper is not None else PoolScraper(pools, timeout_s)
        self.window: dict[PoolName, PoolReadings] = {p: PoolReadings() for p in pools}
        self.last_good: dict[str, MetricsSample] = {}

    async def read_all(self) -> list[CriticalEvent]:
        """One read of every server; the critical conditions it reveals (crashes and restarts of candidate servers)."""
        return self.observe(await self.scraper.read())

    def observe(self, reads: Sequence[PageRead]) -> list[CriticalEvent]:
        """Take one tick's reads into the window; the crashes and restarts of candidate servers they reveal."""
        events: list[CriticalEvent] = []
        for read in reads:
            u, sample = read.server, read.sample
            previous = self.last_good.get(u.base_url)
            self.window[read.pool].by_server.setdefault(u.base_url, []).append(sample)
            if read.pool == "candidate":
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
        await self.scraper.close()


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
    """Per pool: the mean per server of each gauge, the window's preemptions, and the spec-decode acceptance rate
    (``gauges.pool_gauges`` over each server's good reads)."""
    return pool_gauges({pool: [[s for s in samples if s.ok] for samples in r.by_server.values()] for pool, r in readings.items()})


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
