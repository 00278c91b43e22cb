"""The check report's GPU panel per arm, and the bench table's GPU row."""

from __future__ import annotations

import json
import re

from specguard.report.model.data import Charts, GpuPanel, GpuTrace
from specguard.report.render.html import gpu_panels
from specguard.report.render.terminal import _gpu
from specguard.results.models import GpuStats, GpuUsage


def _charts(panels: list[GpuPanel]) -> Charts:
    return Charts(
        objective_title="p95 itl_ms", load_series=[], target="steady", distributions=[], acceptance=[], gauges=[], gpu=panels
    )


def _figure(div: str) -> dict[str, object]:
    match = re.search(r"Plotly\.newPlot\(\s*\"gpu-panels\",\s*(\[.*?\]),\s*(\{.*?\}),\s*\{\"displaylogo", div, re.S)
    assert match is not None
    return {"data": json.loads(match.group(1)), "layout": json.loads(match.group(2))}


def test_one_row_per_arm_with_each_gpus_utilisation_and_memory_over_time() -> None:
    base = GpuTrace(arm="baseline", gpu="0", t_s=[1.0, 2.0], utilization_pct=[40.0, 45.0], memory_used_mib=[70e3, 70e3])
    cand = GpuTrace(arm="candidate", gpu="0", t_s=[1.0, 2.0], utilization_pct=[60.0, 66.0], memory_used_mib=[72e3, 72e3])
    div = gpu_panels(_charts([GpuPanel(arm="baseline", traces=[base]), GpuPanel(arm="candidate", traces=[cand])]))
    assert div is not None
    fig = _figure(div)
    data = fig["data"]
    assert isinstance(data, list) and len(data) == 4
    assert [d["y"] for d in data] == [[40.0, 45.0], [70e3, 70e3], [60.0, 66.0], [72e3, 72e3]]
    assert [d["name"] for d in data] == ["baseline GPU 0"] * 2 + ["candidate GPU 0"] * 2
    titles = [a["text"] for a in fig["layout"]["annotations"]]  # type: ignore[index]
    assert titles[:4] == [
        f"{arm}: GPU {w}" for arm in ("baseline", "candidate") for w in ("utilisation (%)", "memory used (MiB)")
    ]


def test_an_arm_without_gpu_figures_shows_the_reason_and_unsampled_checks_have_no_panel() -> None:
    reason = "NVML not available: NVML Shared Library Not Found"
    div = gpu_panels(_charts([GpuPanel(arm="baseline", traces=[], reason=reason)]))
    assert div is not None and f"not available: {reason}" in div
    assert gpu_panels(_charts([])) is None


def test_the_bench_table_row_shows_each_gpu_or_not_available() -> None:
    stats = GpuStats(
        gpu="0",
        uuid=None,
        name=None,
        samples=3,
        utilization_mean_pct=61.4,
        utilization_max_pct=90.0,
        memory_used_max_mib=71000.0,
        memory_total_mib=81000.0,
        power_mean_w=500.0,
        sm_clock_mean_mhz=1800.0,
    )
    assert _gpu(GpuUsage(available=True, source="dcgm", samples=3, gaps=0, gpus=[stats])) == "0: 61/90, 71000 MiB"
    assert _gpu(GpuUsage(available=False, source="nvml", reason="x", samples=0, gaps=1)) == "not available"
    assert _gpu(None) == "-"
