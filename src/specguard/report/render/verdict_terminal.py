"""The verdict on the terminal: a pure function of verdict.json's model, rich markup out.

One screen: the verdict, what decided it, every other reason grouped by kind (``reason_groups``), one line
each for the cells, the crossover, greedy outputs and warnings, and where the full list is. Every sentence
stays in report.md / verdict.json; the demo's 36 reasons came to 16 "also:" lines and "... and 20 more".
"""

from __future__ import annotations

from collections import Counter

from rich.markup import escape

from specguard.report.build.forest import deciding_cells
from specguard.report.build.greedy_table import equivalence_line
from specguard.report.model.data import VerdictFile
from specguard.report.render.reasons import reason_groups
from specguard.simulated import SIMULATED_SERVER_BANNER
from specguard.verdict.model import LookRecord
from specguard.verdict.reason_groups import ReasonGroup

COLOURS = {"GO": "green", "NO-GO": "red", "INCONCLUSIVE": "yellow"}
DECIDING_SHOWN = 4  # places named on the "decided at" line; the rest are counted
GROUP_LINES = 5  # reason-group lines at most; further kinds share one line


def decided_at(v: VerdictFile, shown: int = DECIDING_SHOWN) -> str | None:
    """ "decided at A (P99 TTFT); level burst (error_rate); and 3 more", or None when nothing names a place."""
    places = deciding_cells(v.reason_details)
    if not places:
        return None
    parts = [f"{p} ({', '.join(ms)})" if ms else p for p, ms in places.items()]
    rest = len(parts) - shown
    return "decided at " + "; ".join(parts[:shown]) + (f"; and {rest} more" if rest > 0 else "")


def cells_line(v: VerdictFile) -> str | None:
    """The per-cell status lines summarised: "12 cells: 8 better, 4 no detectable difference"."""
    if not v.lines:
        return None
    counts = Counter(x.status for x in v.lines)
    n = len(v.lines)
    return f"{n} cell{'s' if n != 1 else ''}: " + ", ".join(f"{k} {s}" for s, k in counts.most_common())


def look_line(looks: list[LookRecord]) -> str | None:
    """A sequential check's one line: "decided at look 2 of 5, 864 requests per arm"."""
    if not looks:
        return None
    last = looks[-1]
    how = "decided" if last.verdict != "INCONCLUSIVE" else "still undecided"
    return f"{how} at look {last.index} of {last.of}, {last.requests_per_arm} requests per arm"


def group_lines(groups: list[ReasonGroup], limit: int = GROUP_LINES) -> list[str]:
    if len(groups) <= limit:
        return [g.text for g in groups]
    rest = groups[limit - 1 :]
    return [g.text for g in groups[: limit - 1]] + ["; ".join(g.text for g in rest)]


def render_terminal(v: VerdictFile, report_html: str) -> str:
    colour = COLOURS[v.verdict]
    out = [f"[bold magenta]{escape(SIMULATED_SERVER_BANNER)}[/bold magenta]"] if v.simulated else []
    out += [f"[bold {colour}]{v.verdict}[/bold {colour}]  ({v.objective})"]
    deciding = decided_at(v)
    out += [f"  [bold]{escape(deciding)}[/bold]"] if deciding else []
    looks = look_line(v.looks)
    out += [f"  {looks}"] if looks else []
    groups = reason_groups(v)
    if v.verdict == "GO" or not groups:
        out += [f"  - {escape(r)}" for r in v.reasons[:1]]
    else:
        out += [f"  - {escape(t)}" for t in group_lines(groups)]
    if v.baseline_imports:
        out += [f"  baseline imported, not measured, in {len(v.baseline_imports)} cell(s) (see the report)"]
    cells = cells_line(v)
    out += [f"  {cells}"] if cells else []
    out += [f"  crossover: {escape('; '.join(v.crossover))}"] if v.crossover else []
    greedy = equivalence_line(v.equivalence)
    out += [f"  {escape(greedy)}"] if greedy else []
    warnings = [g.line for g in v.warning_groups] if v.warning_groups else v.warnings
    if warnings:
        more = f" (and {len(warnings) - 1} more kinds)" if len(warnings) > 1 else ""
        out += [f"  [yellow]warning[/yellow] {escape(warnings[0])}{more}"]
    out.append(f"report: {report_html}  (also report.md, verdict.json)")
    return "\n".join(out)
