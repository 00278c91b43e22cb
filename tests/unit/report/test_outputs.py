"""The registry of report outputs: every file a report is written as comes from one registration by format."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.report.render.outputs import CANARY_OUTPUTS, PARTIAL_OUTPUTS, REPORT_OUTPUTS, Outputs
from specguard.results.check_dir import CheckDir


def test_the_check_partial_and_canary_reports_register_their_files_by_format(tmp_path: Path) -> None:
    d = CheckDir(tmp_path)
    assert REPORT_OUTPUTS.formats == ["json", "markdown", "html", "csv"]
    assert REPORT_OUTPUTS.paths(tmp_path) == [d.verdict_json, d.report_md, d.report_html, d.cells_csv]
    assert PARTIAL_OUTPUTS.paths(tmp_path) == [d.partial_md, d.partial_html]
    assert [p.name for p in CANARY_OUTPUTS.paths(tmp_path)] == ["report.html", "report.md"]


def test_a_registry_writes_every_format_it_holds_and_refuses_one_registered_twice(tmp_path: Path) -> None:
    outputs: Outputs[int] = Outputs("a test report")
    outputs.register("a", lambda out: out / "a.txt", lambda n: f"a{n}")
    outputs.register("b", lambda out: out / "b.txt", lambda n: f"b{n * 2}")
    assert outputs.write(3, tmp_path) == [tmp_path / "a.txt", tmp_path / "b.txt"]
    assert (tmp_path / "a.txt").read_text() == "a3" and (tmp_path / "b.txt").read_text() == "b6"
    with pytest.raises(ValueError, match="format 'a' is registered twice"):
        outputs.register("a", lambda out: out / "c.txt", str)
