"""The verdict on the terminal: a pure function of verdict.json's model, rich markup out."""

from __future__ import annotations

from rich.markup import escape

from specguard.report.data import VerdictFile
from specguard.report.forest import deciding_line
from specguard.report.greedy_table import equivalence_line
from specguard.sim.marker import SIMULATED_SERVER_BANNER

COLOURS = {"GO": "green", "NO-GO": "red", "INCONCLUSIVE": "yellow"}


def render_terminal(v: VerdictFile, report_html: str) -> str:
    colour = COLOURS[v.verdict]
    out = [f"[bold magenta]{escape(SIMULATED_SERVER_BANNER)}[/bold magenta]"] if v.simulated else []
    out += [f"[bold {colour}]{v.verdict}[/bold {colour}]  ({v.objective})"]
    deciding = deciding_line(v.reason_details)
    out += [f"  [bold]{escape(deciding)}[/bold]"] if deciding else []
    out += [f"  - {r}" for r in v.reasons]
    out += [f"  baseline imported, not measured: {b.cell} from {escape(b.source)} ({b.format})" for b in v.baseline_imports]
    out += [f"  {x.traffic:>10} / {x.sampling} / {x.segment}: {x.status}: {x.text}" for x in v.lines]
    out += [f"  crossover: {c}" for c in v.crossover]
    greedy = equivalence_line(v.equivalence)
    out += [f"  {escape(greedy)}"] if greedy else []
    warnings = [g.line for g in v.warning_groups] if v.warning_groups else v.warnings
    out += [f"  [yellow]warning[/yellow] {escape(w)}" for w in warnings]
    out.append(f"report: {report_html}  (also report.md, verdict.json)")
    return "\n".join(out)
