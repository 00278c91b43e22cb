"""The forest plot's rows and the verdict banner's deciding cells: the evidence first, reshaped, not recomputed.

``forest`` lays out the intervals the verdict already holds (``CellComparison``): one row per cell for
the objective and for each ratio guardrail, with the line each is held to (the objective's minimum
improvement, a guardrail's budget). The error-rate guardrail is a difference of proportions, not a
ratio, so it stays in the tables. ``deciding_cells`` names the cells (and metrics) the verdict's own
reasons name, so a reader sees at once where to look.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from specguard.report.model.data import Forest, ForestRow
from specguard.verdict import CellComparison, Reason
from specguard.verdict.level_guards import WHOLE_CHECK

__all__ = ["REPORT_DEFINITIONS", "deciding_cells", "deciding_line", "forest"]

# What the report's own figures mean; added to the check's definitions in verdict.json and both reports.
REPORT_DEFINITIONS = {
    "forest plot": "one row per cell, one panel per metric (the objective, P99 E2E, P99 TTFT): the ratio candidate / "
    "baseline and its 95 % interval; dotted at x1 (no change), dashed at the line it is held to (1 - min_improvement "
    "for a lower-is-better objective, 1 + it for a higher-is-better one, 1 + the budget for a guardrail); a row is red "
    "where its interval is wholly on the worse side of 1 (a regression), green wholly on the better side, grey "
    "otherwise; the rows the verdict's reasons name are drawn as large diamonds with a black outline. "
    "The error rate (a difference, not a ratio) is in the tables",
    "deciding cells": "the cells, traffic levels or the whole check, with the metrics, named by the verdict's "
    "first-rank reasons (not the 'also:' ones)",
    "ECDF": "empirical cumulative distribution: the fraction of values <= x, x on a log axis; drawn from every value "
    "of the top 1 % and 600 evenly spaced ranks below, with p95 and p99 (numpy's linear rule, over all values) marked",
    "warning groups": "the warnings of one kind counted (in runs for a run's client warnings, in cells for a cell's), "
    "with the worst value and where it was; every warning's own text is kept",
}


def deciding_cells(reasons: Sequence[Reason]) -> dict[str, list[str]]:
    """Where -> the metrics the verdict's first-rank reasons name there ("also:" reasons left out), in order.

    Where is the cell, or for a guardrail tested over a traffic level "level <name>", or for one tested over
    the whole check (the error rate) "the whole check"; a reason that names no metric and no place is left out.
    """
    out: dict[str, list[str]] = {}
    for r in reasons:
        if r.secondary:
            continue
        where = r.cell or (f"level {r.level}" if r.level else (WHOLE_CHECK if r.metric == "error_rate" else None))
        if where is None:
            continue
        metrics = out.setdefault(where, [])
        if r.metric is not None and r.metric not in metrics:
            metrics.append(r.metric)
    return out


def deciding_line(reasons: Sequence[Reason]) -> str | None:
    """ "decided at steady / greedy / default (P99 TTFT); burst / greedy / default (p95 itl_ms)", or None."""
    cells = deciding_cells(reasons)
    if not cells:
        return None
    parts = [f"{cell} ({', '.join(ms)})" if ms else cell for cell, ms in cells.items()]
    return "decided at " + "; ".join(parts)


def interval_effect(ci_low: float, ci_high: float, higher_is_better: bool) -> Literal["regression", "improvement", "neither"]:
    """What a ratio's interval says against no change: wholly on the worse side of 1, wholly on the better, or neither."""
    above, below = ci_low > 1.0, ci_high < 1.0
    if not (above or below):
        return "neither"
    return "improvement" if above == higher_is_better else "regression"


def forest(
    cells: Sequence[CellComparison],
    objective: str,
    higher_is_better: bool,
    min_improvement: float,
    budgets: Mapping[str, float],
    reasons: Sequence[Reason],
) -> Forest:
    """Rows for the objective (target cells and the others) and each ratio guardrail (every cell); GO cells too."""
    deciding = deciding_cells(reasons)
    limits = {objective: 1 + min_improvement if higher_is_better else 1 - min_improvement}
    labels = {objective: f"min improvement {min_improvement:.0%}".replace("%", " %")}
    for name, budget in budgets.items():
        limits[name] = 1 + budget
        labels[name] = f"budget +{budget:.0%}".replace("%", " %")
    rows: list[ForestRow] = []
    for c in cells:
        results = {objective: c.objective, "P99 E2E": c.p99_e2e, "P99 TTFT": c.p99_ttft}
        for metric in limits:
            r = results.get(metric)
            if r is None or not all(math.isfinite(x) for x in (r.ratio, r.ci_low, r.ci_high)):
                continue  # a ratio over an empty arm has no place on a ratio axis
            rows.append(
                ForestRow(
                    cell=c.name,
                    metric=metric,
                    role="objective" if metric == objective else "guardrail",
                    ratio=r.ratio,
                    ci_low=r.ci_low,
                    ci_high=r.ci_high,
                    limit=limits[metric],
                    target=c.target,
                    deciding=metric in deciding.get(c.name, []),
                    effect=interval_effect(r.ci_low, r.ci_high, higher_is_better and metric == objective),
                )
            )
    return Forest(metrics=list(limits), limits=limits, limit_labels=labels, rows=rows)
