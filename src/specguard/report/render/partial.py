"""report-partial.md and report-partial.html: what an interrupted check measured so far, with no verdict.

Renderers of a finished ``PartialReport``; they read no files. The first
line of each says that the report is partial and what is missing, because a
partial matrix can point either way and must never be read as a verdict.
"""

from __future__ import annotations

import html

from specguard.number_format import fmt
from specguard.report.model.partial import PartialReport
from specguard.report.render.markdown import simulated_lines
from specguard.results.models import Percentiles
from specguard.simulated import SIMULATED_NOTE, SIMULATED_SERVER_BANNER


def _p(p: Percentiles, key: str) -> str:
    return fmt(getattr(p, key))


HEADER = [
    "arm",
    "repetition",
    "cell",
    "requests",
    "errors",
    "ITL p50 ms",
    "ITL p95 ms",
    "TTFT p95 ms",
    "E2E p99 ms",
    "incomplete",
]


def _rows(data: PartialReport) -> list[list[str]]:
    return [
        [
            r.arm,
            r.repetition,
            r.cell,
            str(r.summary.requests),
            str(r.summary.errors),
            _p(r.summary.itl_ms, "p50"),
            _p(r.summary.itl_ms, "p95"),
            _p(r.summary.ttft_ms, "p95"),
            _p(r.summary.e2e_ms, "p99"),
            "yes" if r.summary.incomplete or r.summary.interrupted else "",
        ]
        for r in data.runs
    ]


def headline(data: PartialReport) -> str:
    return (
        f"PARTIAL REPORT, NO VERDICT: the check `{data.plan}` is incomplete ({len(data.missing)} missing: "
        f"{', '.join(data.missing[:6])}{', ...' if len(data.missing) > 6 else ''})"
    )


def resume_command(data: PartialReport) -> str:
    return f"specguard check {data.plan_path} --out {data.out} --resume"


def render_partial_markdown(data: PartialReport) -> str:
    out = [
        f"# {headline(data)}",
        "",
        *simulated_lines(data.simulated),
        f"Continue it with `{resume_command(data)}`.",
        "",
        "## Runs measured so far",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    out += ["| " + " | ".join(row) + " |" for row in _rows(data)]
    out += ["", "## Definitions", ""] + [f"- **{k}**: {v}" for k, v in data.definitions.items()]
    return "\n".join(out) + "\n"


def render_partial_html(data: PartialReport) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in _rows(data))
    defs = "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in data.definitions.items())
    banner = f"<p id='simulated'><b>{e(SIMULATED_SERVER_BANNER)}.</b> {e(SIMULATED_NOTE)}</p>" if data.simulated else ""
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>specguard partial report</title>"
        "<style>body{font-family:sans-serif;margin:2em}h1{color:#a15c00}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}</style></head><body>"
        f"<h1 id='partial'>{e(headline(data))}</h1>{banner}<p>Continue it with <code>{e(resume_command(data))}</code>.</p>"
        f"<h2>Runs measured so far</h2><table><tr>{head}</tr>{body}</table>"
        f"<h2>Definitions</h2><ul>{defs}</ul></body></html>\n"
    )
