"""GPU sampling: a scripted DCGM exporter page parsed, NVML at its Python boundary (the real scraper child scraping
the page: tests/system/test_gpu_scraper_child.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from aiohttp import web

from specguard.results.models import GpuSample
from specguard.results.store import read_jsonl
from specguard.server_metrics import scraper
from specguard.server_metrics.gpu import NvmlSampler, gpu_source, is_loopback_url, parse_dcgm_text

# Two H100s as dcgm-exporter 3.x writes them; GPU 0 appears twice (once per pod it serves), as the exporter does.
_LABELS = 'Hostname="node-7",modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION="550.54.15"'
DCGM_PAGE = f"""# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="GPU-aaaa",device="nvidia0",{_LABELS}}} 1980
DCGM_FI_DEV_SM_CLOCK{{gpu="1",UUID="GPU-bbbb",device="nvidia1",{_LABELS}}} 1755
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-aaaa",device="nvidia0",{_LABELS},pod="vllm-0"}} 87
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-aaaa",device="nvidia0",{_LABELS},pod="vllm-1"}} 87
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-bbbb",device="nvidia1",{_LABELS}}} 12
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{{gpu="0",UUID="GPU-aaaa",device="nvidia0",{_LABELS}}} 4000
DCGM_FI_DEV_FB_FREE{{gpu="1",UUID="GPU-bbbb",device="nvidia1",{_LABELS}}} 80000
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-aaaa",device="nvidia0",{_LABELS}}} 77000
DCGM_FI_DEV_FB_USED{{gpu="1",UUID="GPU-bbbb",device="nvidia1",{_LABELS}}} 1000
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-aaaa",device="nvidia0",{_LABELS}}} 612.5
DCGM_FI_DEV_POWER_USAGE{{gpu="1",UUID="GPU-bbbb",device="nvidia1",{_LABELS}}} 71.25
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-aaaa",device="nvidia0",{_LABELS}}} 64
"""


def _check_page_values(sample: GpuSample) -> None:
    assert sample.ok and sample.source == "dcgm"
    first, second = sample.gpus
    assert (first.gpu, first.uuid, first.name) == ("0", "GPU-aaaa", "NVIDIA H100 80GB HBM3")
    assert (first.utilization_pct, first.memory_used_mib, first.memory_total_mib) == (87, 77000, 81000)
    assert (first.sm_clock_mhz, first.power_w) == (1980, 612.5)
    assert (second.gpu, second.utilization_pct, second.memory_used_mib, second.power_w) == ("1", 12, 1000, 71.25)


def test_a_dcgm_page_becomes_one_reading_per_gpu() -> None:
    _check_page_values(parse_dcgm_text(DCGM_PAGE, 1.5, "during"))


def test_a_page_without_dcgm_series_is_a_gap_with_the_reason() -> None:
    sample = parse_dcgm_text("vllm:num_requests_running 3\n", 0.0, "during")
    assert not sample.ok and sample.gpus == [] and "no DCGM_FI_DEV_" in (sample.error or "")


def test_the_source_is_nvml_on_loopback_a_url_when_given_and_a_reason_otherwise() -> None:
    assert is_loopback_url("http://127.0.0.1:8000") and is_loopback_url("http://[::1]:8000")
    assert is_loopback_url("http://localhost:8000/v1") and not is_loopback_url("http://10.0.0.7:8000")
    assert gpu_source("http://127.0.0.1:8000", None) == ("nvml", None)
    assert gpu_source("http://10.0.0.7:8000", "http://10.0.0.7:9400/metrics") == ("http://10.0.0.7:9400/metrics", None)
    assert gpu_source("http://127.0.0.1:8000", "none") == (None, None)
    source, reason = gpu_source("http://10.0.0.7:8000", None)
    assert source is None and reason is not None and "10.0.0.7" in reason and "--gpu-metrics-url" in reason


@asynccontextmanager
async def dcgm_exporter(pages: list[str]) -> AsyncIterator[tuple[str, list[int]]]:
    """A scripted exporter: the pages in turn (the last repeated); the number of requests it answered."""
    served = [0]

    async def metrics(_request: web.Request) -> web.Response:
        page = pages[min(served[0], len(pages) - 1)]
        served[0] += 1
        return web.Response(text=page, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/metrics", served
    finally:
        await runner.cleanup()


class _Utilization(SimpleNamespace):
    gpu: int


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, count: int = 2) -> list[str]:
    """pynvml's functions replaced by scripted answers for ``count`` GPUs; the calls made, in order."""
    calls: list[str] = []
    gib = 1024**3

    def record(name: str, value: Any) -> Any:
        def call(*args: Any) -> Any:
            calls.append(name)
            return value(*args) if callable(value) else value

        return call

    def not_supported(_handle: Any) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    answers: dict[str, Any] = {
        "nvmlInit": None,
        "nvmlShutdown": None,
        "nvmlDeviceGetCount": count,
        "nvmlDeviceGetHandleByIndex": lambda i: f"handle-{i}",
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}",
        "nvmlDeviceGetName": lambda h: b"NVIDIA L4",  # bytes, as older releases return
        "nvmlDeviceGetUtilizationRates": lambda h: _Utilization(gpu=40 if h == "handle-0" else 5, memory=10),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=6 * gib, total=24 * gib, free=18 * gib),
        "nvmlDeviceGetClockInfo": lambda h, clock: 2040 if clock == pynvml.NVML_CLOCK_SM else 6250,
        "nvmlDeviceGetPowerUsage": lambda h: 55_500 if h == "handle-0" else not_supported(h),
    }
    for name, value in answers.items():
        monkeypatch.setattr(pynvml, name, record(name, value))
    return calls


def test_nvml_readings_per_gpu_in_specguards_units(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_nvml(monkeypatch)
    sampler = NvmlSampler()
    assert sampler.unavailable is None
    sample = sampler.read(time.monotonic(), "during")
    sampler.close()
    assert sample.ok and sample.source == "nvml" and [g.gpu for g in sample.gpus] == ["0", "1"]
    first, second = sample.gpus
    assert (first.uuid, first.name, first.utilization_pct) == ("GPU-handle-0", "NVIDIA L4", 40)
    assert (first.memory_used_mib, first.memory_total_mib) == (6 * 1024, 24 * 1024)
    assert (first.sm_clock_mhz, first.power_w) == (2040, 55.5)
    assert second.utilization_pct == 5 and second.power_w is None  # not supported on that board: None, not a failure
    assert calls[0] == "nvmlInit" and calls[-1] == "nvmlShutdown"


def test_without_the_nvml_library_the_reason_is_recorded_and_nothing_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    sampler = NvmlSampler()
    sample = sampler.read(time.monotonic(), "during")
    sampler.close()
    assert sampler.unavailable == "NVML not available: NVML Shared Library Not Found"
    assert not sample.ok and sample.source == "nvml" and sample.error == sampler.unavailable and sample.gpus == []


def test_a_driver_without_gpus_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, count=0)
    assert NvmlSampler().unavailable == "NVML not available: the driver sees no GPU"


def test_the_child_writes_nvmls_reason_once_and_stops_sampling(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def missing() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    path = tmp_path / "gpu_metrics.jsonl"
    with path.open("a", encoding="utf-8") as fh:
        assert scraper._sample_gpu(NvmlSampler(), fh, time.monotonic()) is None
    (line,) = read_jsonl(path, GpuSample)
    assert not line.ok and "NVML Shared Library Not Found" in (line.error or "")
