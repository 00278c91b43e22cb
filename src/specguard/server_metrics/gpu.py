"""The server host's GPUs during a run: NVML on a local server, a DCGM exporter's page on a remote one.

Gate 4 lists GPU utilisation among the metrics that decide a rollout: a candidate that keeps its
latency only by running the GPU harder has less headroom left. The scraper child samples the GPUs
on each of its ticks, beside the /metrics scrape, into ``gpu_metrics.jsonl``. A source that cannot
be read (no NVIDIA driver, no GPU, an exporter that does not answer) is recorded as a sample with
``ok`` false and the reason, never raised: the run goes on without GPU figures.

NVML sees only the GPUs of the machine it runs on, so it is used only when the server's base URL is
on loopback; a fleet runs NVIDIA's dcgm-exporter next to each server, given by ``--gpu-metrics-url``.
"""

from __future__ import annotations

import ipaddress
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from specguard.results.models import GpuReading, GpuSample, GpuSource

__all__ = [
    "DCGM_FIELDS",
    "DcgmSampler",
    "GpuSampler",
    "NvmlSampler",
    "gpu_sampler",
    "gpu_source",
    "is_loopback_url",
    "parse_dcgm_text",
]

# dcgm-exporter's default counters (etc/default-counters.csv) -> GpuReading field. FB_* are MiB, power W,
# the SM clock MHz, utilisation %: the units of GpuReading, so the values are taken as they are.
DCGM_FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization_pct",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_FB_FREE": "memory_free_mib",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
}

_MIB = 1024.0 * 1024.0


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is this machine by its loopback name or address."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def gpu_source(base_url: str, gpu_metrics_url: str | None) -> tuple[str | None, str | None]:
    """What the run samples: ``("nvml" or a DCGM exporter URL, None)``, or ``(None, why not)``.

    ``gpu_metrics_url`` 'none' turns sampling off: ``(None, None)``, nothing is recorded.
    """
    if gpu_metrics_url == "none":
        return None, None
    if gpu_metrics_url:
        return gpu_metrics_url, None
    if is_loopback_url(base_url):
        return "nvml", None
    host = urlsplit(base_url).hostname
    return None, f"the server ({host}) is not on this host and no --gpu-metrics-url (a DCGM exporter) was given"


def parse_dcgm_text(text: str, t_s: float, phase: str) -> GpuSample:
    """A DCGM exporter's page reduced to one reading per GPU. Pure.

    A GPU is keyed by its ``gpu`` and ``UUID`` labels: the exporter repeats a GPU's series once per pod
    it is attached to, with the same value, so the first is kept. Total memory is FB_USED + FB_FREE (the
    exporter leaves the driver's reserved share out of both).
    """
    per_gpu: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                field = DCGM_FIELDS.get(s.name)
                if field is None:
                    continue
                key = (s.labels.get("gpu", "?"), s.labels.get("UUID", ""))
                entry = per_gpu.setdefault(key, {"gpu": key[0], "uuid": key[1] or None, "name": s.labels.get("modelName")})
                entry.setdefault(field, s.value)
    except (ValueError, TypeError, IndexError) as exc:
        return _failed(t_s, phase, "dcgm", f"unparsable DCGM exporter page: {exc}")
    if not per_gpu:
        return _failed(t_s, phase, "dcgm", "the page has no DCGM_FI_DEV_* GPU series (is it a DCGM exporter?)")
    readings = []
    for entry in sorted(per_gpu.values(), key=lambda e: (_index(e["gpu"]), e["gpu"])):
        free = entry.pop("memory_free_mib", None)
        used = entry.get("memory_used_mib")
        entry["memory_total_mib"] = used + free if used is not None and free is not None else None
        readings.append(GpuReading(**entry))
    return GpuSample(t_s=t_s, phase=phase, source="dcgm", ok=True, gpus=readings)  # type: ignore[arg-type]


def _index(gpu: str) -> int:
    return int(gpu) if gpu.isdigit() else 1 << 30


def _failed(t_s: float, phase: str, source: GpuSource | None, error: str) -> GpuSample:
    # Why the ignore: phase is one of the callers' names, which GpuSample validates
    return GpuSample(t_s=t_s, phase=phase, source=source, ok=False, error=error)  # type: ignore[arg-type]


class GpuSampler:
    """One source of GPU samples; ``read`` never raises."""

    source: GpuSource

    def read(self, t0: float, phase: str) -> GpuSample:
        raise NotImplementedError

    def close(self) -> None:
        pass


class DcgmSampler(GpuSampler):
    """A DCGM exporter's Prometheus page, fetched on each read."""

    source: GpuSource = "dcgm"

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def read(self, t0: float, phase: str) -> GpuSample:
        t = time.monotonic() - t0
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
                text = resp.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            return _failed(t, phase, "dcgm", f"{self.url}: {type(exc).__name__}: {exc}")
        return parse_dcgm_text(text, t, phase)


class NvmlSampler(GpuSampler):
    """NVML through ``pynvml`` (nvidia-ml-py): every GPU this machine's driver sees.

    ``unavailable`` holds the reason when NVML cannot be used (no package, no driver library, no GPU);
    ``read`` then returns that reason as a failed sample.
    """

    source: GpuSource = "nvml"

    def __init__(self) -> None:
        self.unavailable: str | None = None
        self._nvml: Any = None
        self._handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
        except ImportError:
            self.unavailable = "NVML not available: nvidia-ml-py (pynvml) is not installed"
            return
        except pynvml.NVMLError as exc:
            self.unavailable = f"NVML not available: {exc}"
            return
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            self.unavailable = f"NVML not available: {exc}"
        if not self._handles and self.unavailable is None:
            self.unavailable = "NVML not available: the driver sees no GPU"

    def read(self, t0: float, phase: str) -> GpuSample:
        t = time.monotonic() - t0
        if self.unavailable is not None:
            return _failed(t, phase, "nvml", self.unavailable)
        readings = [self._reading(i, h) for i, h in enumerate(self._handles)]
        return GpuSample(t_s=t, phase=phase, source="nvml", ok=True, gpus=readings)  # type: ignore[arg-type]

    def _reading(self, index: int, handle: Any) -> GpuReading:
        nv = self._nvml
        memory = self._query(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        util = self._query(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
        power_mw = self._query(lambda: nv.nvmlDeviceGetPowerUsage(handle))
        return GpuReading(
            gpu=str(index),
            uuid=_text(self._query(lambda: nv.nvmlDeviceGetUUID(handle))),
            name=_text(self._query(lambda: nv.nvmlDeviceGetName(handle))),
            utilization_pct=float(util.gpu) if util is not None else None,
            memory_used_mib=memory.used / _MIB if memory is not None else None,
            memory_total_mib=memory.total / _MIB if memory is not None else None,
            sm_clock_mhz=_number(self._query(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
        )

    def _query(self, call: Callable[[], Any]) -> Any:
        """One NVML query; None where the GPU does not support it (power on some boards, clocks under MIG)."""
        try:
            return call()
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None


def _text(value: Any) -> str | None:
    # Older nvidia-ml-py releases return bytes.
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(value: Any) -> float | None:
    return float(value) if value is not None else None


def gpu_sampler(source: str) -> GpuSampler:
    """The sampler for what ``gpu_source`` chose: 'nvml' or a DCGM exporter's URL."""
    return NvmlSampler() if source == "nvml" else DcgmSampler(source)
