"""cells.csv: the check's cell table for spreadsheets, one row per traffic level x sampling x segment. Pure.

Each guarded metric gives its baseline and candidate values, the ratio candidate / baseline and the ratio's
95 % interval (the same numbers as verdict.json's ``cells``); rates are fractions; an absent value is an
empty cell. The check's labels are repeated on every row (``label:KEY`` columns) so that rows of several
checks can be stacked and still told apart.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

from specguard.analysis.ab_statistics import RatioResult
from specguard.report.model.data import ReportData
from specguard.verdict import CellComparison, CellLine

__all__ = ["CELL_COLUMNS", "cells_csv", "render_cells_csv"]

_RATIOS = ("objective", "p99_e2e", "p99_ttft")
_SCALARS = (
    "error_rate_baseline",
    "error_rate_candidate",
    "errors_baseline",
    "errors_candidate",
    "requests_baseline",
    "requests_candidate",
    "acceptance_rate",
    "kv_usage_baseline",
    "kv_usage_candidate",
    "waiting_baseline",
    "waiting_candidate",
)
CELL_COLUMNS = (
    "traffic",
    "sampling",
    "segment",
    "target",
    "offered_load",
    "status",
    *(f"{m}_{part}" for m in _RATIOS for part in ("baseline", "candidate", "ratio", "ci_low", "ci_high", "enough_samples")),
    *_SCALARS,
)


def _ratio(r: RatioResult) -> list[object]:
    return [r.baseline, r.candidate, r.ratio, r.ci_low, r.ci_high, r.enough_samples]


def cells_csv(cells: Sequence[CellComparison], lines: Sequence[CellLine], labels: Mapping[str, str]) -> str:
    """The table; ``lines`` give each cell's status (matched by traffic, sampling and segment)."""
    status = {(x.traffic, x.sampling, x.segment): x.status for x in lines}
    keys = sorted(labels)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CELL_COLUMNS, *(f"label:{k}" for k in keys)])
    for c in cells:
        row: list[object] = [c.traffic, c.sampling, c.segment, c.target, c.offered_load]
        row.append(status.get((c.traffic, c.sampling, c.segment), ""))
        for name in _RATIOS:
            row += _ratio(getattr(c, name))
        row += [getattr(c, name) for name in _SCALARS]
        row += [labels[k] for k in keys]
        w.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def render_cells_csv(data: ReportData) -> str:
    """cells.csv of a check's report data (the registered ``csv`` output)."""
    v = data.verdict
    return cells_csv(v.cells, v.lines, v.labels)
