"""report.html: one self-contained file (plotly.js inlined, no network) with the verdict and its evidence."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
import plotly
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specguard.analysis.compare import metric_values
from specguard.check.aggregate import rep_dirs
from specguard.report.markdown import pinned_line
from specguard.results.check_dir import ARMS, cell_key
from specguard.results.store import load_run, load_summary

if TYPE_CHECKING:
    from specguard.check.report import CheckRecord, VerdictFile

COLORS = {"baseline": "#636efa", "candidate": "#ef553b"}
TEMPLATE = Path(__file__).with_name("templates") / "report.html.j2"


def _div(fig: go.Figure, name: str) -> str:
    fig.update_layout(template="plotly_white", height=360, margin={"l": 50, "r": 20, "t": 50, "b": 40})
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=name, config={"displaylogo": False}))


def latency_vs_load(v: VerdictFile, record: CheckRecord) -> str:
    order = {t.name: t.offered_load for t in record.plan.traffic}
    groups = sorted({(c.sampling, c.segment) for c in v.cells})
    metric, pct = record.plan.objective.metric, record.plan.objective.percentile
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"{pct} {metric}", "p99 e2e_ms"))
    for sampling, segment in groups:
        cells = sorted((c for c in v.cells if (c.sampling, c.segment) == (sampling, segment)), key=lambda c: order[c.traffic])
        x = [f"{c.traffic} ({order[c.traffic]:g})" for c in cells]
        for arm in ARMS:
            dash = "solid" if arm == "candidate" else "dot"
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=[getattr(c.objective, arm) for c in cells],
                    name=f"{arm} {sampling}/{segment}",
                    line={"color": COLORS[arm], "dash": dash},
                    legendgroup=arm,
                ),
                1,
                1,
            )
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=[getattr(c.p99_e2e, arm) for c in cells],
                    showlegend=False,
                    line={"color": COLORS[arm], "dash": dash},
                    legendgroup=arm,
                ),
                1,
                2,
            )
    fig.update_layout(title="Latency versus offered load")
    return _div(fig, "latency-vs-load")


def _cell_dirs(record: CheckRecord, out: Path, arm: str, traffic: str, sampling: str) -> list[Path]:
    """Every stored run of one arm at one traffic level and sampling setting: all prompt sources, all repetitions."""
    plan = record.plan
    return [d for i in range(len(plan.prompts)) for d in rep_dirs(out, arm, cell_key(traffic, sampling, i), plan.repetitions)]


def distributions(record: CheckRecord, out: Path) -> str:
    plan = record.plan
    target = next(t for t in plan.traffic if t.target)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("per-token ITL (ms)", "TPOT (ms)"))
    for arm in ARMS:
        itl: list[float] = []
        tpot: list[float] = []
        for s in plan.sampling:
            for d in _cell_dirs(record, out, arm, target.name, s.name):
                records = load_run(d)[1]
                itl += [x for r in metric_values(records, "itl_ms") for x in r]
                tpot += [x for r in metric_values(records, "tpot_ms") for x in r]
        fig.add_trace(go.Box(y=itl[:20000], name=arm, marker_color=COLORS[arm], boxpoints=False), 1, 1)
        fig.add_trace(go.Box(y=tpot, name=arm, marker_color=COLORS[arm], showlegend=False), 1, 2)
    fig.update_layout(title=f"Distributions at the target level '{target.name}' (all sampling settings)")
    return _div(fig, "distributions")


def acceptance(record: CheckRecord, out: Path) -> str:
    plan = record.plan
    fig = go.Figure()
    for t in plan.traffic:
        for s in plan.sampling:
            per_pos: list[list[float]] = []
            for d in _cell_dirs(record, out, "candidate", t.name, s.name):
                acc = load_summary(d).acceptance
                if acc is not None and acc.per_position:
                    per_pos.append(acc.per_position)
            if per_pos:
                k = min(len(p) for p in per_pos)
                mean = [sum(p[j] for p in per_pos) / len(per_pos) for j in range(k)]
                fig.add_trace(go.Bar(x=[f"pos {j}" for j in range(k)], y=mean, name=f"{t.name} / {s.name}"))
    if not fig.data:
        fig.add_annotation(text="the candidate exposes no spec-decode counters", showarrow=False)
    fig.update_layout(
        title="Candidate per-position acceptance (accepted at position i / drafts)", barmode="group", yaxis={"range": [0, 1]}
    )
    return _div(fig, "acceptance")


def server_gauges(record: CheckRecord, out: Path) -> str:
    plan = record.plan
    target = next(t for t in plan.traffic if t.target)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("KV-cache usage", "waiting requests"))
    for arm in ARMS:
        dirs = rep_dirs(out, arm, cell_key(target.name, plan.sampling[0].name, 0), plan.repetitions)
        if not dirs:
            continue
        samples = [s for s in load_run(dirs[0])[2] if s.ok]
        t = [s.t_s for s in samples]
        fig.add_trace(
            go.Scatter(x=t, y=[s.gauges.get("kv_cache_usage") for s in samples], name=arm, line={"color": COLORS[arm]}), 1, 1
        )
        fig.add_trace(
            go.Scatter(x=t, y=[s.gauges.get("requests_waiting") for s in samples], showlegend=False, line={"color": COLORS[arm]}),
            1,
            2,
        )
    fig.update_layout(
        title=f"Server gauges over time (target level '{target.name}', first repetition)",
        xaxis_title="seconds",
        xaxis2_title="seconds",
    )
    return _div(fig, "server-gauges")


def render_html(v: VerdictFile, record: CheckRecord, out: Path) -> str:
    plotly_js = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True)
    charts = [latency_vs_load(v, record), distributions(record, out), acceptance(record, out), server_gauges(record, out)]
    return env.get_template(TEMPLATE.name).render(
        v=v,
        charts=charts,
        plotly_js=plotly_js,
        out=os.fspath(out),
        pinned_line=pinned_line,
    )
