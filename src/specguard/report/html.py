"""report.html: one self-contained file (plotly.js inlined, no network) with the verdict and its evidence.

A pure function of ``ReportData``: it reads no run directory and computes no figure.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from specguard.report.data import Charts, ReportData
from specguard.report.markdown import pinned_line
from specguard.report.numbers import fmt, fmt_percent, fmt_samples

COLORS = {"baseline": "#636efa", "candidate": "#ef553b"}
TEMPLATE = Path(__file__).with_name("templates") / "report.html.j2"


def _div(fig: go.Figure, name: str) -> str:
    fig.update_layout(template="plotly_white", height=360, margin={"l": 50, "r": 20, "t": 50, "b": 40})
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=name, config={"displaylogo": False}))


def latency_vs_load(c: Charts) -> str:
    fig = make_subplots(rows=1, cols=2, subplot_titles=(c.objective_title, "p99 e2e_ms"))
    for s in c.load_series:
        line = {"color": COLORS[s.arm], "dash": "solid" if s.arm == "candidate" else "dot"}
        name = f"{s.arm} {s.sampling}/{s.segment}"
        fig.add_trace(go.Scatter(x=s.x, y=s.objective, name=name, line=line, legendgroup=s.arm), 1, 1)
        fig.add_trace(go.Scatter(x=s.x, y=s.p99_e2e, showlegend=False, line=line, legendgroup=s.arm), 1, 2)
    fig.update_layout(title="Latency versus offered load")
    return _div(fig, "latency-vs-load")


def distributions(c: Charts) -> str:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("per-token ITL (ms)", "TPOT (ms)"))
    for d in c.distributions:
        fig.add_trace(go.Box(y=d.itl_ms, name=d.arm, marker_color=COLORS[d.arm], boxpoints=False), 1, 1)
        fig.add_trace(go.Box(y=d.tpot_ms, name=d.arm, marker_color=COLORS[d.arm], showlegend=False), 1, 2)
    fig.update_layout(title=f"Distributions at the target level '{c.target}' (all sampling settings)")
    return _div(fig, "distributions")


def acceptance(c: Charts) -> str:
    fig = go.Figure()
    for bars in c.acceptance:
        x = [f"pos {j}" for j in range(len(bars.per_position))]
        fig.add_trace(go.Bar(x=x, y=bars.per_position, name=bars.name))
    if not fig.data:
        fig.add_annotation(text="the candidate exposes no spec-decode counters", showarrow=False)
    fig.update_layout(
        title="Candidate per-position acceptance (accepted at position i / drafts)", barmode="group", yaxis={"range": [0, 1]}
    )
    return _div(fig, "acceptance")


def server_gauges(c: Charts) -> str:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("KV-cache usage", "waiting requests"))
    for g in c.gauges:
        line = {"color": COLORS[g.arm]}
        fig.add_trace(go.Scatter(x=g.t_s, y=g.kv_cache_usage, name=g.arm, line=line), 1, 1)
        fig.add_trace(go.Scatter(x=g.t_s, y=g.requests_waiting, showlegend=False, line=line), 1, 2)
    fig.update_layout(
        title=f"Server gauges over time (target level '{c.target}', first repetition)",
        xaxis_title="seconds",
        xaxis2_title="seconds",
    )
    return _div(fig, "server-gauges")


def render_html(data: ReportData) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True)
    c = data.charts
    charts = [latency_vs_load(c), distributions(c), acceptance(c), server_gauges(c)]
    return env.get_template(TEMPLATE.name).render(
        v=data.verdict,
        charts=charts,
        plotly_js=get_plotlyjs(),
        out=data.out,
        pinned_line=pinned_line,
        fmt=fmt,
        fmt_percent=fmt_percent,
        fmt_samples=fmt_samples,
    )
