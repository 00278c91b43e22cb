"""Periodic /metrics scraping during a run. A failed or unparsable scrape is recorded as a gap, never raised."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from specguard.results.models import MetricsSample
from specguard.server_metrics.parse import MetricsParseError, parse_metrics_text


class MetricsScraper:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        t0: float,
        on_sample: Callable[[MetricsSample], None],
        interval_s: float = 1.0,
        timeout_s: float = 5.0,
    ) -> None:
        self.session = session
        self.url = url
        self.t0 = t0
        self.on_sample = on_sample
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.samples: list[MetricsSample] = []
        self._task: asyncio.Task[None] | None = None

    async def scrape(self, phase: str) -> MetricsSample:
        t = time.monotonic() - self.t0
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self.session.get(self.url) as resp:
                    text = await resp.text(errors="replace")
                    if resp.status != 200:
                        raise MetricsParseError(f"HTTP {resp.status}")
            sample = parse_metrics_text(text, t, phase)
        except (aiohttp.ClientError, OSError, TimeoutError, MetricsParseError) as exc:
            sample = MetricsSample(t_s=t, phase=phase, ok=False, error=f"{type(exc).__name__}: {exc}")  # type: ignore[arg-type]
        self.samples.append(sample)
        self.on_sample(sample)
        return sample

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.scrape("during")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
