"""GPU sampling by the real scraper child (a process): a scripted DCGM exporter page, served in-test, scraped per
GPU over time, and an exporter that does not answer recorded as a gap while the child carries on.

The system tier (the scraper runs as a child process); the page parsing and NVML at its Python boundary are in
tests/unit/server_metrics/test_gpu.py, whose exporter and page these tests share.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from specguard.results.models import GpuSample
from specguard.results.store import read_jsonl
from specguard.server_metrics.scraper import ScraperProcess
from tests.unit.server_metrics.test_gpu import DCGM_PAGE, _check_page_values, dcgm_exporter


async def _lines(path: Path, n: int, deadline_s: float = 30.0) -> list[GpuSample]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists() and len(samples := read_jsonl(path, GpuSample)) >= n:
            return samples
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {n} GPU samples")


async def test_the_scraper_child_writes_the_exporters_values_per_gpu_over_time(tmp_path: Path) -> None:
    busier = DCGM_PAGE.replace("} 87\n", "} 95\n")  # GPU 0 busier from the second scrape on
    async with dcgm_exporter([DCGM_PAGE, busier]) as (url, served):
        out, gpu_out = tmp_path / "server_metrics.jsonl", tmp_path / "gpu_metrics.jsonl"
        child = ScraperProcess(None, 0.1, out, gpu=url, gpu_out=gpu_out)
        await asyncio.to_thread(child.launch)
        t0 = time.monotonic()
        child.begin(t0)
        try:
            samples = await _lines(gpu_out, 3)
        finally:
            await asyncio.to_thread(child.stop)
    assert not out.exists()  # no /metrics URL: GPU samples only
    _check_page_values(samples[0])
    assert [s.gpus[0].utilization_pct for s in samples[1:3]] == [95, 95]
    times = [s.t_s for s in samples]
    assert times == sorted(times) and times[0] > 0 and all(s.phase == "during" for s in samples)
    assert served[0] >= 3


async def test_an_exporter_that_does_not_answer_is_a_gap_and_the_child_carries_on(tmp_path: Path) -> None:
    async with dcgm_exporter([DCGM_PAGE]) as (url, _served):
        dead = url.replace("/metrics", "/nothing-here")
        gpu_out = tmp_path / "gpu_metrics.jsonl"
        child = ScraperProcess(None, 0.1, tmp_path / "m.jsonl", gpu=dead, gpu_out=gpu_out)
        await asyncio.to_thread(child.launch)
        child.begin(time.monotonic())
        try:
            samples = await _lines(gpu_out, 2)
        finally:
            await asyncio.to_thread(child.stop)
    assert all(not s.ok and "404" in (s.error or "") for s in samples)
