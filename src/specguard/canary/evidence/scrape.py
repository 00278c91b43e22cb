"""The one reader of the pools' ``/metrics`` pages: each server's page read once per tick and parsed once.

The pool watcher (crashes, restarts, gauges) and the scrape metrics source (histograms, gauges and counters for
the server-side judge) read the same pages; behind an engine with ``metrics: scrape`` both ran, so every page
was fetched and parsed twice per tick. Now one ``PoolScraper.read`` feeds both.

Parsing a vLLM metrics page takes milliseconds of pure Python; it runs in a worker thread so that the proxy's
event loop keeps stamping chunk arrivals meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aiohttp

from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.vocabulary import PoolName
from specguard.results.models import MetricsSample
from specguard.server_metrics.histograms import Histogram, parse_histograms
from specguard.server_metrics.parse import MetricsParseError, parse_metrics_text
from specguard.server_metrics.scraper import fetch_page

__all__ = ["PageRead", "PoolScraper"]


@dataclass(frozen=True)
class PageRead:
    """One server's page at one tick: the parsed sample (``ok`` False with the error when it could not be read),
    and its histograms when the scraper was asked for them (None when they could not be parsed)."""

    pool: PoolName
    server: Upstream
    sample: MetricsSample
    histograms: dict[str, Histogram] | None = None
    histogram_error: str | None = None


def _parse(text: str, t: float, histograms: bool) -> tuple[MetricsSample, dict[str, Histogram] | None, str | None]:
    sample = parse_metrics_text(text, t, "during")
    if not histograms:
        return sample, None, None
    try:
        return sample, parse_histograms(text), None
    except MetricsParseError as exc:
        return sample, None, f"{type(exc).__name__}: {exc}"


class PoolScraper:
    """Reads every server's ``/metrics`` of the pools, all at once, each bounded by ``timeout_s``."""

    def __init__(self, pools: Mapping[PoolName, Sequence[Upstream]], timeout_s: float = 5.0, *, histograms: bool = False) -> None:
        self.pools = pools
        self.timeout_s = timeout_s
        self.histograms = histograms
        self._session: aiohttp.ClientSession | None = None

    async def _read(self, pool: PoolName, server: Upstream, t: float) -> PageRead:
        assert self._session is not None
        try:
            text = await fetch_page(self._session, server.metrics_url, self.timeout_s)
            sample, hist, hist_error = await asyncio.to_thread(_parse, text, t, self.histograms)
        except (aiohttp.ClientError, OSError, TimeoutError, MetricsParseError) as exc:
            failed = MetricsSample(t_s=t, phase="during", ok=False, error=f"{type(exc).__name__}: {exc}")
            return PageRead(pool, server, failed)
        return PageRead(pool, server, sample, hist, hist_error)

    async def read(self) -> list[PageRead]:
        """One read of every server, stamped with this tick's time, in the pools' order."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        t = time.time()
        targets = [(pool, u) for pool, ups in self.pools.items() for u in ups]
        return list(await asyncio.gather(*(self._read(pool, u, t) for pool, u in targets)))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
