"""A report built on the simulated server says so at its top, in every renderer, and one built on vLLM does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.check.report import build_report_data
from specguard.report.model.data import ReportData, VerdictFile
from specguard.report.model.partial import PartialReport
from specguard.report.render.html import render_html
from specguard.report.render.markdown import render_markdown
from specguard.report.render.partial import render_partial_html, render_partial_markdown
from specguard.report.render.verdict_terminal import render_terminal
from specguard.simulated import SIMULATED_SERVER_BANNER
from tests.unit.report.test_report import make_check


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> ReportData:
    record, out = make_check(tmp_path_factory.mktemp("banner") / "c")
    return build_report_data(record, out)


def _simulated(data: ReportData, simulated: bool) -> ReportData:
    return data.model_copy(update={"verdict": data.verdict.model_copy(update={"simulated": simulated})})


def test_markdown_opens_with_the_banner_when_simulated(finished: ReportData) -> None:
    md = render_markdown(_simulated(finished, True)).splitlines()
    assert "(SIMULATED)" in md[0]
    assert md[2].startswith(f"> **{SIMULATED_SERVER_BANNER}.**")
    real = render_markdown(_simulated(finished, False))
    assert SIMULATED_SERVER_BANNER not in real and "SIMULATED" not in real


def test_html_shows_the_banner_above_the_verdict_when_simulated(finished: ReportData) -> None:
    html = render_html(_simulated(finished, True))
    banner = html.index('id="simulated"')
    assert banner < html.index('id="verdict"') and "<title>specguard: SIMULATED: " in html
    assert SIMULATED_SERVER_BANNER.replace("'", "&#39;") in html[banner : banner + 400]
    assert 'id="simulated"' not in render_html(_simulated(finished, False))


def test_terminal_verdict_starts_with_the_banner_when_simulated(finished: ReportData) -> None:
    v = _simulated(finished, True).verdict
    assert SIMULATED_SERVER_BANNER in render_terminal(v, "r.html").splitlines()[0]
    assert SIMULATED_SERVER_BANNER not in render_terminal(finished.verdict, "r.html")


def test_a_verdict_file_written_before_the_field_loads_as_not_simulated(finished: ReportData, tmp_path: Path) -> None:
    old = finished.verdict.model_dump(mode="json", exclude={"simulated"})
    assert "simulated" not in old
    assert VerdictFile.model_validate(old).simulated is False


def test_a_partial_report_of_simulated_runs_says_so_under_its_headline() -> None:
    data = PartialReport(plan="p", plan_path="p.yaml", out="o", missing=["block candidate rep1"], runs=[], definitions={})
    sim = data.model_copy(update={"simulated": True})
    md = render_partial_markdown(sim).splitlines()
    assert md[0].startswith("# PARTIAL REPORT") and md[2].startswith(f"> **{SIMULATED_SERVER_BANNER}.**")
    html = render_partial_html(sim)
    assert html.index("id='partial'") < html.index("id='simulated'")
    assert SIMULATED_SERVER_BANNER not in render_partial_markdown(data) + render_partial_html(data)
