"""The canary report's HTML page in headless Chromium, offline: every chart drawn, the banner and the hooks box.

The system tier (it runs Chromium); the report's content is checked without it in tests/unit/canary/test_report.py,
whose rolled-back scenario this test renders.
"""

from __future__ import annotations

import json

import pytest

from specguard.canary.report import build_canary_report_data, write_canary_report
from specguard.report.canary_html import CHART_IDS
from tests.browser import inspect_page
from tests.unit.canary.test_report import INVENTORIES, META, rollback_scenario


@pytest.fixture(scope="module")
def scenario():
    return rollback_scenario()


def test_the_html_page_draws_its_charts_in_chromium_offline(scenario, tmp_path):
    data = build_canary_report_data(META, *scenario[:2], scenario[4], INVENTORIES)
    html_path, _ = write_canary_report(data, tmp_path)
    ids = json.dumps(list(CHART_IDS))
    probe = (
        f"[{ids}.map(id => !!document.querySelector('#' + id + '.js-plotly-plot .main-svg')),"
        " document.getElementById('status').innerText, !!document.getElementById('hooks-failed')]"
    )
    page = inspect_page(html_path, probe, tmp_path / "canary.png")
    assert page["errors"] == []
    drawn, banner, hooks_box = page["probe"]
    assert drawn == [True] * len(CHART_IDS) and "rolled back at 5 %" in banner and hooks_box
    assert all(url.startswith(("file:", "data:", "about:")) for url in page["requests"]), page["requests"]
