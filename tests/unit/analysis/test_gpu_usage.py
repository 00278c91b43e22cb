"""The GPU part of a run's summary, and the rule that a busier GPU for the same throughput is worth a line."""

from __future__ import annotations

import pytest

from specguard.analysis.gpu_usage import gpu_usage, higher_utilisation_warning, mean_utilisation
from specguard.analysis.summarize import summarize
from specguard.results.models import GpuReading, GpuSample


def _sample(t: float, *readings: tuple[str, float, float, float, float]) -> GpuSample:
    gpus = [
        GpuReading(gpu=g, uuid=f"GPU-{g}", utilization_pct=u, memory_used_mib=m, sm_clock_mhz=c, power_w=p)
        for g, u, m, c, p in readings
    ]
    return GpuSample(t_s=t, phase="during", source="dcgm", ok=True, gpus=gpus)


def test_per_gpu_mean_p95_and_max_of_utilisation_memory_power_and_clock() -> None:
    samples = [
        _sample(1.0, ("0", 60, 70_000, 1800, 500), ("1", 10, 2_000, 1400, 90)),
        GpuSample(t_s=2.0, phase="during", source="dcgm", ok=False, error="TimeoutError: timed out"),
        _sample(3.0, ("0", 90, 71_000, 1600, 600), ("1", 20, 2_500, 1500, 110)),
    ]
    usage = gpu_usage(samples)
    assert usage is not None and usage.available and usage.source == "dcgm"
    assert (usage.samples, usage.gaps, usage.reason) == (2, 1, "TimeoutError: timed out")
    first, second = usage.gpus
    assert (first.gpu, first.samples, first.utilization_mean_pct, first.utilization_max_pct) == ("0", 2, 75, 90)
    assert (first.memory_used_max_mib, first.power_mean_w, first.sm_clock_mean_mhz) == (71_000, 550, 1700)
    assert (second.utilization_mean_pct, second.memory_used_max_mib, second.power_mean_w) == (15, 2_500, 100)
    # p95 by numpy's linear rule between the two readings: 60 + 0.95 x 30 = 88.5
    assert (first.utilization_p95_pct, first.memory_used_mean_mib, first.memory_used_p95_mib) == (88.5, 70_500, 70_950)
    assert (first.power_p95_w, first.power_max_w, first.sm_clock_p95_mhz, first.sm_clock_max_mhz) == (595, 600, 1790, 1800)


def test_no_samples_is_not_sampled_and_only_failures_is_not_available_with_the_reason() -> None:
    assert gpu_usage([]) is None
    reason = "NVML not available: NVML Shared Library Not Found"
    usage = gpu_usage([GpuSample(t_s=0.1, phase="during", source="nvml", ok=False, error=reason)])
    assert usage is not None and not usage.available and usage.reason == reason and usage.gpus == []


def test_the_summary_carries_the_gpu_figures_and_says_when_they_are_not_available() -> None:
    reason = "NVML not available: NVML Shared Library Not Found"
    missing = summarize([], [], gpu_samples=[GpuSample(t_s=0.1, phase="during", source="nvml", ok=False, error=reason)])
    assert missing.gpu is not None and not missing.gpu.available
    assert f"GPU figures not available: {reason}" in missing.notes and not any("GPU" in w for w in missing.warnings)
    assert summarize([], []).gpu is None  # not sampled: no figures, no note
    measured = summarize([], [], gpu_samples=[_sample(1.0, ("0", 50, 1_000, 1500, 300))])
    assert measured.gpu is not None and measured.gpu.gpus[0].utilization_mean_pct == 50
    assert mean_utilisation(measured) == 50 and mean_utilisation(missing) is None


@pytest.mark.parametrize(
    ("util", "throughput", "warned"),
    [
        ((50.0, 72.0), (10.0, 10.2), True),  # 22 points busier, same throughput
        ((50.0, 55.0), (10.0, 10.0), False),  # within the rise that counts
        ((50.0, 80.0), (10.0, 13.0), False),  # busier, but serving 30 % more: the work explains it
        ((50.0, 80.0), (10.0, 9.0), False),  # busier and slower: throughput differs, the verdict says it
        ((None, 80.0), (10.0, 10.0), False),
    ],
)
def test_a_candidate_busier_for_the_same_throughput_is_worth_a_line(
    util: tuple[float | None, float], throughput: tuple[float, float], warned: bool
) -> None:
    line = higher_utilisation_warning("steady / t0 / chat", util[0], util[1], throughput[0], throughput[1])
    assert (line is not None) == warned
    if line is not None:
        assert line.startswith("steady / t0 / chat: ") and "50 % -> 72 %" in line
