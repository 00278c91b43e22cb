"""The check's report.html in headless Chromium, offline: every chart draws, the new ones as they should, a screenshot.

Real run files (the same check directory as test_report.py), no vLLM: the page is what a reader opens.
The screenshot is kept in artifacts/report-check.png for a person to look at.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specguard.check.report import build_report_data, write_outputs
from specguard.report.render.html import CHART_IDS
from specguard.results.check_dir import CheckDir
from tests.browser import contrast_probe, contrast_ratio, inspect_page
from tests.unit.report.test_greedy_gpu_report import add_gpu_samples, add_outputs
from tests.unit.report.test_report import make_check

CONTRAST_CLASSES = ["banner GO", "banner NO-GO", "banner INCONCLUSIVE", "banner simulated", "better", "worse", "inconclusive"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

PROBE = """(() => {
  const plot = id => document.getElementById(id);
  const drawn = IDS.filter(id => plot(id)).map(id => [id, !!document.querySelector('#' + id + '.js-plotly-plot .main-svg')]);
  const forest = plot('forest');
  const dist = plot('distributions');
  return {
    drawn: drawn,
    forest_points: forest.querySelectorAll('.scatterlayer .point').length,
    forest_error_bars: forest.querySelectorAll('.errorbar').length,
    forest_lines: forest._fullLayout.shapes.length,
    forest_above_tables: forest.getBoundingClientRect().top < document.getElementById('lines').getBoundingClientRect().top,
    dist_axes: [dist._fullLayout.xaxis.type, dist._fullLayout.xaxis2.type],
    dist_traces: dist._fullData.map(t => t.type),
    deciding: (document.getElementById('deciding') || {innerText: ''}).innerText,
    warnings: document.getElementById('warnings').innerText,
    greedy_rows: Array.from(document.querySelectorAll('#greedy-outputs tr')).map(r => r.innerText),
    gpu_rows: Array.from(document.querySelectorAll('#gpu-figures tr')).map(r => r.innerText),
    gpu_notes: (document.getElementById('gpu-notes') || {innerText: ''}).innerText,
    contrast: CONTRAST,
  };
})()"""


def test_the_check_report_draws_its_charts_in_chromium_offline(tmp_path):
    record, out = make_check(tmp_path / "c", candidate_send_lag_s=(0.05, 0.2))
    add_outputs(out)
    add_gpu_samples(out)
    write_outputs(record, out)
    data = build_report_data(record, out)
    forest = data.charts.forest
    assert forest is not None
    shot = tmp_path / "report-check.png"
    probe = PROBE.replace("IDS", json.dumps(list(CHART_IDS))).replace("CONTRAST", contrast_probe(CONTRAST_CLASSES))
    page = inspect_page(CheckDir(out).report_html, probe, shot)
    assert page["errors"] == []
    p = page["probe"]
    drawn = dict(p["drawn"])
    assert drawn and all(drawn.values()) and {"forest", "distributions", "latency-vs-load"} <= set(drawn), p
    # the forest: a point and an interval per cell x metric, and per metric its line and "no change"
    assert p["forest_points"] == len(forest.rows) and p["forest_error_bars"] == len(forest.rows), p
    assert p["forest_lines"] == 2 * len(forest.metrics) and p["forest_above_tables"], p
    # the distributions: ECDFs (lines and marks), no box, on log axes
    assert p["dist_axes"] == ["log", "log"] and set(p["dist_traces"]) == {"scatter"}, p
    assert "decided at the whole check (error_rate); level steady" in p["deciding"]  # level-scope guardrails
    assert "client send lag above 10 ms in 2 of 4 runs, worst 200 ms at steady / greedy / candidate" in p["warnings"]
    # the greedy-output table (header and the one greedy cell) and the GPU figures (header, the baseline's GPU)
    assert len(p["greedy_rows"]) == 2 and "18 of 120 (15.0 %)" in p["greedy_rows"][1], p["greedy_rows"]
    assert len(p["gpu_rows"]) == 2 and "60.0 / 85.5 / 90.0" in p["gpu_rows"][1], p["gpu_rows"]
    assert "candidate: not available: NVML not available" in p["gpu_notes"]
    assert shot.stat().st_size > 20_000
    assert all(url.startswith(("file:", "data:", "about:")) for url in page["requests"]), page["requests"]
    # Every verdict banner and verdict word meets WCAG AA, 4.5:1 (INCONCLUSIVE's orange had 3.1:1: issue 28).
    ratios = {classes: contrast_ratio(fg, bg) for classes, fg, bg in p["contrast"]}
    assert all(r >= 4.5 for r in ratios.values()), ratios
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "report-check.png")
