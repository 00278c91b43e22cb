"""The verdict on the terminal: a pure function of verdict.json's model, rich markup out."""

from __future__ import annotations

from specguard.report.data import VerdictFile

COLOURS = {"GO": "green", "NO-GO": "red", "INCONCLUSIVE": "yellow"}


def render_terminal(v: VerdictFile, report_html: str) -> str:
    colour = COLOURS[v.verdict]
    out = [f"[bold {colour}]{v.verdict}[/bold {colour}]  ({v.objective})"]
    out += [f"  - {r}" for r in v.reasons]
    out += [f"  {x.traffic:>10} / {x.sampling} / {x.segment}: {x.status}: {x.text}" for x in v.lines]
    out += [f"  crossover: {c}" for c in v.crossover]
    out += [f"  [yellow]warning[/yellow] {w}" for w in v.warnings]
    out.append(f"report: {report_html}  (also report.md, verdict.json)")
    return "\n".join(out)
