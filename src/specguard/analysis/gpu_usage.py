"""Per-GPU figures of a run from its GPU samples, and the A/B rule that reads them. Pure.

The rule: speculation spends GPU work on drafts the target may reject, so a candidate can keep its
throughput (or improve its latency) only by keeping the GPU busier. That is headroom the fleet loses
at higher load, worth a warning even when the verdict is GO.
"""

from __future__ import annotations

from collections.abc import Sequence

from specguard.analysis.percentiles import percentiles
from specguard.results.models import GpuReading, GpuSample, GpuStats, GpuUsage, Summary

__all__ = [
    "UTILISATION_RISE_PCT",
    "SAME_THROUGHPUT_TOLERANCE",
    "gpu_usage",
    "higher_utilisation_warning",
    "mean_utilisation",
]

# A rise of fewer points than this is within what one GPU's utilisation moves between repetitions
# of the same load (NVML's figure is the share of a 1/6 s to 1 s window a kernel ran).
UTILISATION_RISE_PCT = 10.0
# Throughputs within this relative difference count as "the same".
SAME_THROUGHPUT_TOLERANCE = 0.05


def gpu_usage(samples: Sequence[GpuSample]) -> GpuUsage | None:
    """Per GPU, the mean, p95 and max of utilisation, memory used, power and SM clock; None when not sampled."""
    if not samples:
        return None
    good = [s for s in samples if s.ok]
    failed = [s for s in samples if not s.ok]
    source = next((s.source for s in samples if s.source is not None), None)
    first_error = failed[0].error if failed else None
    if not good:
        return GpuUsage(available=False, source=source, reason=first_error, samples=0, gaps=len(failed))
    by_gpu: dict[tuple[str, str | None], list[GpuReading]] = {}
    for s in good:
        for r in s.gpus:
            by_gpu.setdefault((r.gpu, r.uuid), []).append(r)
    stats = [_stats(readings) for readings in by_gpu.values()]
    return GpuUsage(available=True, source=source, reason=first_error, samples=len(good), gaps=len(failed), gpus=stats)


def _values(readings: Sequence[GpuReading], field: str) -> list[float]:
    return [v for r in readings if (v := getattr(r, field)) is not None]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _stats(readings: Sequence[GpuReading]) -> GpuStats:
    util, memory, power, clock = (
        percentiles(_values(readings, f)) for f in ("utilization_pct", "memory_used_mib", "power_w", "sm_clock_mhz")
    )
    total = _values(readings, "memory_total_mib")
    last = readings[-1]
    return GpuStats(
        gpu=last.gpu,
        uuid=last.uuid,
        name=last.name,
        samples=len(readings),
        utilization_mean_pct=util.mean,
        utilization_p95_pct=util.p95,
        utilization_max_pct=util.max,
        memory_used_mean_mib=memory.mean,
        memory_used_p95_mib=memory.p95,
        memory_used_max_mib=memory.max,
        memory_total_mib=max(total) if total else None,
        power_mean_w=power.mean,
        power_p95_w=power.p95,
        power_max_w=power.max,
        sm_clock_mean_mhz=clock.mean,
        sm_clock_p95_mhz=clock.p95,
        sm_clock_max_mhz=clock.max,
    )


def mean_utilisation(summary: Summary) -> float | None:
    """The mean over GPUs of each GPU's mean utilisation (%), None without GPU figures."""
    if summary.gpu is None or not summary.gpu.available:
        return None
    return _mean([g.utilization_mean_pct for g in summary.gpu.gpus if g.utilization_mean_pct is not None])


def higher_utilisation_warning(
    name: str,
    utilisation_baseline: float | None,
    utilisation_candidate: float | None,
    throughput_baseline: float | None,
    throughput_candidate: float | None,
) -> str | None:
    """A line when the candidate ran its GPUs at least 10 points busier for a throughput within 5 % of the baseline's.

    ``throughput``: what the cell served, in one unit for both arms (goodput, requests/s or output tokens/s).
    """
    if None in (utilisation_baseline, utilisation_candidate, throughput_baseline, throughput_candidate):
        return None
    assert utilisation_baseline is not None and utilisation_candidate is not None  # for mypy: checked above
    assert throughput_baseline is not None and throughput_candidate is not None
    if throughput_baseline <= 0:
        return None
    rise = utilisation_candidate - utilisation_baseline
    same = abs(throughput_candidate / throughput_baseline - 1.0) <= SAME_THROUGHPUT_TOLERANCE
    if rise < UTILISATION_RISE_PCT or not same:
        return None
    return (
        f"{name}: the candidate ran its GPUs busier for the same throughput (utilisation "
        f"{utilisation_baseline:.0f} % -> {utilisation_candidate:.0f} % mean, throughput x"
        f"{throughput_candidate / throughput_baseline:.2f}): less headroom at higher load"
    )
