"""The GPU panels' figures as table rows: per arm and GPU, mean / p95 / max of what the sampler read. Pure formatting.

The figures are ``analysis.gpu_usage``'s of the run the panel draws (``GpuPanel.usage``), so the table
and the chart above it describe the same samples; an arm whose sampler read nothing says why.
"""

from __future__ import annotations

from specguard.number_format import fmt
from specguard.report.model.data import GpuPanel
from specguard.results.models import GpuStats

__all__ = ["GPU_DEFINITIONS", "HEADER", "NOT_SAMPLED", "gpu_notes", "gpu_rows", "gpu_title"]

HEADER = (
    "arm",
    "GPU",
    "samples",
    "utilisation % (mean / p95 / max)",
    "memory used MiB (mean / p95 / max, of total)",
    "SM clock MHz (mean / p95 / max)",
    "power W (mean / p95 / max)",
)

# why there is no GPU figure at all; the renderers write "not sampled: <this>"
NOT_SAMPLED = "no run recorded GPU samples (--gpu-metrics-url none, or runs made before specguard sampled GPUs)"

GPU_DEFINITIONS = {
    "GPU figures": "per arm and GPU, over the GPU samples of the run the GPU chart draws (the target level's first cell, "
    "first repetition; one sample per scrape tick while its traffic ran): mean, p95 (numpy's linear rule) and max of "
    "utilisation (the share of the sample period a kernel ran, as NVML or DCGM report it), memory used (MiB, with the "
    "GPU's total), SM clock (MHz) and power draw (W); 'not available' gives the reason the sampler recorded",
}


def gpu_title(target: str) -> str:
    return f"GPUs (target level '{target}', first repetition)"


def _spread(mean: float | None, p95: float | None, top: float | None, digits: int = 0) -> str:
    return " / ".join(fmt(x, digits) for x in (mean, p95, top))


def _row(arm: str, g: GpuStats) -> list[str]:
    memory = _spread(g.memory_used_mean_mib, g.memory_used_p95_mib, g.memory_used_max_mib)
    if g.memory_total_mib is not None:
        memory += f" of {fmt(g.memory_total_mib, 0)}"
    return [
        arm,
        g.gpu + (f" ({g.name})" if g.name else ""),
        str(g.samples),
        _spread(g.utilization_mean_pct, g.utilization_p95_pct, g.utilization_max_pct, 1),
        memory,
        _spread(g.sm_clock_mean_mhz, g.sm_clock_p95_mhz, g.sm_clock_max_mhz),
        _spread(g.power_mean_w, g.power_p95_w, g.power_max_w, 1),
    ]


def gpu_rows(panels: list[GpuPanel]) -> list[list[str]]:
    """One row per arm and GPU that has figures, in ``HEADER``'s order."""
    return [_row(p.arm, g) for p in panels if p.usage is not None and p.usage.available for g in p.usage.gpus]


def gpu_notes(panels: list[GpuPanel]) -> list[str]:
    """Per arm without figures, "candidate: not available: <reason>"; per arm with failed samples, how many."""
    out = []
    for p in panels:
        u = p.usage
        if u is None or not u.available:
            reason = p.reason or (u.reason if u is not None else None) or "no GPU sample succeeded"
            out.append(f"{p.arm}: not available: {reason}")
        elif u.gaps:
            out.append(f"{p.arm}: {u.gaps} of {u.samples + u.gaps} GPU samples failed ({u.reason}): the figures are of the rest")
    return out
