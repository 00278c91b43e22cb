"""The canary report's HTML page in headless Chromium, offline: every chart drawn, the banner and the hooks box.

The system tier (it runs Chromium); the report's content is checked without it in tests/unit/canary/test_report.py,
whose rolled-back scenario this test renders.
"""

from __future__ import annotations

import json

import pytest

from specguard.report.build.canary import build_canary_report_data, write_canary_report
from specguard.report.render.canary_html import CHART_IDS
from tests.browser import contrast_probe, contrast_ratio, inspect_page
from tests.unit.canary.test_report import INVENTORIES, META, rollback_scenario

# Every banner class the page can carry (a status) and every verdict word as text.
CANARY_CONTRAST = [
    *(f"banner {s}" for s in ("running", "paused", "promoted", "rolled_back")),
    "FAIL",
    "PASS",
    "INCONCLUSIVE",
    "hooks-failed",
]


@pytest.fixture(scope="module")
def scenario():
    return rollback_scenario()


def test_the_html_page_draws_its_charts_in_chromium_offline(scenario, tmp_path):
    data = build_canary_report_data(META, *scenario[:2], scenario[4], INVENTORIES)
    html_path, _ = write_canary_report(data, tmp_path)
    ids = json.dumps(list(CHART_IDS))
    probe = (
        f"[{ids}.map(id => !!document.querySelector('#' + id + '.js-plotly-plot .main-svg')),"
        " document.getElementById('status').innerText, !!document.getElementById('hooks-failed'),"
        f" {contrast_probe(CANARY_CONTRAST)}]"
    )
    page = inspect_page(html_path, probe, tmp_path / "canary.png")
    assert page["errors"] == []
    drawn, banner, hooks_box, contrast = page["probe"]
    # Every status banner and verdict word meets WCAG AA, 4.5:1 (INCONCLUSIVE was orange on orange: issue 28).
    ratios = {classes: contrast_ratio(fg, bg) for classes, fg, bg in contrast}
    assert all(r >= 4.5 for r in ratios.values()), {k: round(v, 2) for k, v in ratios.items() if v < 4.5}
    assert drawn == [True] * len(CHART_IDS) and "rolled back at 5 %" in banner and hooks_box
    assert all(url.startswith(("file:", "data:", "about:")) for url in page["requests"]), page["requests"]
