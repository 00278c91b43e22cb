"""``sim run``'s HTML page in headless Chromium, offline: its three charts draw, without a JS error, SIMULATED on top.

A real (short) simulation, no server: two rates, a draft-model arm. The screenshot is kept in
artifacts/report-sim.png for a person to look at.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specguard.sim.html import CHART_IDS, render_sim_html
from specguard.sim.results import SIMULATED_BANNER
from specguard.sim.run import SimRequest, run_sim
from tests.browser import inspect_page

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

PROBE = """(() => {
  const drawn = IDS.map(id => [id, !!document.querySelector('#' + id + '.js-plotly-plot .main-svg')]);
  const lat = document.getElementById('latency-vs-rate');
  const speed = document.getElementById('speedup-vs-rate');
  const bands = document.getElementById('k-bands');
  return {
    drawn: drawn,
    title: document.title,
    banner: document.getElementById('banner').innerText,
    banner_first: document.body.firstElementChild.id,
    latency_traces: lat._fullData.length,
    speedup_shapes: speed._fullLayout.shapes.length,
    band_bars: bands._fullData[0].x.length,
  };
})()"""


def test_the_sim_report_draws_its_charts_in_chromium_offline(tmp_path: Path) -> None:
    report = run_sim(
        SimRequest(
            target="llama-3.1-8b",
            gpu="h100-80gb",
            rates=[2, 16],
            prompt_len=256,
            output_len=128,
            method="draft_model",
            draft="llama-3.2-1b",
            acceptance=[0.8, 0.6, 0.4],
            duration_s=30,
        )
    )
    page = tmp_path / "sim.html"
    page.write_text(render_sim_html(report))
    shot = tmp_path / "report-sim.png"
    result = inspect_page(page, PROBE.replace("IDS", json.dumps(list(CHART_IDS))), shot)
    assert result["errors"] == []
    p = result["probe"]
    assert dict(p["drawn"]) == dict.fromkeys(CHART_IDS, True), p
    assert p["title"].startswith("SIMULATED") and SIMULATED_BANNER in p["banner"] and p["banner_first"] == "banner", p
    assert "not a measurement" in p["banner"]
    # p50 and p99 of E2E and TPOT for both arms; the 1.0 line (and a crossover line if there is one); a bar per band
    assert p["latency_traces"] == 2 * 2 * 2, p
    assert p["speedup_shapes"] == 1 + (report.crossover_rate is not None), p
    assert p["band_bars"] == len(report.k_schedule) >= 1, p
    assert all(url.startswith(("file:", "data:", "about:")) for url in result["requests"]), result["requests"]
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "report-sim.png")
