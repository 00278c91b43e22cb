"""Every file a report is written as, registered by format: the check's, the partial report's, the canary's.

As GuideLLM's ``benchmark/outputs/output.py`` registers its outputs by name over one report model, each
``Outputs`` here maps a format name to the file it fills and the pure renderer that fills it; the writers
(``check/report.py``, ``report/build/canary.py``) render and write whatever is registered, one loop, so a new
format is one ``register`` line. Renderers stay pure functions of the model; file names stay their owners'
(``CheckDir`` for a check directory).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from specguard.report.model.canary_data import CanaryReportData
from specguard.report.model.data import ReportData
from specguard.report.model.partial import PartialReport
from specguard.report.render.canary_html import render_canary_html
from specguard.report.render.canary_markdown import render_canary_markdown
from specguard.report.render.cells_csv import render_cells_csv
from specguard.report.render.html import render_html
from specguard.report.render.markdown import render_markdown
from specguard.report.render.partial import render_partial_html, render_partial_markdown
from specguard.results.check_dir import CheckDir

__all__ = ["CANARY_OUTPUTS", "PARTIAL_OUTPUTS", "REPORT_OUTPUTS", "Output", "Outputs"]

D = TypeVar("D")


@dataclass(frozen=True)
class Output(Generic[D]):
    format: str
    path: Callable[[Path], Path]  # the output directory -> the file this format fills
    render: Callable[[D], str]


class Outputs(Generic[D]):
    """A registry of one report model's outputs, by format name, in registration order (the order they are written)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._by_format: dict[str, Output[D]] = {}

    def register(self, fmt: str, path: Callable[[Path], Path], render: Callable[[D], str]) -> None:
        if fmt in self._by_format:
            raise ValueError(f"{self.what}: format '{fmt}' is registered twice")
        self._by_format[fmt] = Output(fmt, path, render)

    def __iter__(self) -> Iterator[Output[D]]:
        return iter(self._by_format.values())

    def __getitem__(self, fmt: str) -> Output[D]:
        return self._by_format[fmt]

    @property
    def formats(self) -> list[str]:
        return list(self._by_format)

    def paths(self, out_dir: Path) -> list[Path]:
        return [o.path(out_dir) for o in self]

    def render(self, data: D, out_dir: Path) -> dict[Path, str]:
        """Every registered output's text, keyed by its file: rendered before anything is written."""
        return {o.path(out_dir): o.render(data) for o in self}

    def write(self, data: D, out_dir: Path) -> list[Path]:
        """Render every output, then write each; the files written, in registration order."""
        texts = self.render(data, out_dir)
        for path, text in texts.items():
            path.write_text(text)
        return list(texts)


def render_verdict_json(data: ReportData) -> str:
    return data.verdict.model_dump_json(indent=2)


REPORT_OUTPUTS: Outputs[ReportData] = Outputs("the check's report")
REPORT_OUTPUTS.register("json", lambda out: CheckDir(out).verdict_json, render_verdict_json)
REPORT_OUTPUTS.register("markdown", lambda out: CheckDir(out).report_md, render_markdown)
REPORT_OUTPUTS.register("html", lambda out: CheckDir(out).report_html, render_html)
REPORT_OUTPUTS.register("csv", lambda out: CheckDir(out).cells_csv, render_cells_csv)

PARTIAL_OUTPUTS: Outputs[PartialReport] = Outputs("an interrupted check's partial report")
PARTIAL_OUTPUTS.register("markdown", lambda out: CheckDir(out).partial_md, render_partial_markdown)
PARTIAL_OUTPUTS.register("html", lambda out: CheckDir(out).partial_html, render_partial_html)

CANARY_OUTPUTS: Outputs[CanaryReportData] = Outputs("the canary's report")
CANARY_OUTPUTS.register("html", lambda out: out / "report.html", render_canary_html)
CANARY_OUTPUTS.register("markdown", lambda out: out / "report.md", render_canary_markdown)
