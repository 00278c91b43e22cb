"""The canary's report.html: one self-contained page (plotly.js inlined, no network), the same shell as check's.

A pure function of ``CanaryReportData``: two charts (the candidate's weight over time as a step line with the
decisions marked, and each window's ratios with their intervals per segment x metric) and the tables of
templates/canary.html.j2. Failing hooks are shown in a red box at the top and again in their table.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from specguard.number_format import fmt, fmt_percent
from specguard.report.model.canary_data import CanaryReportData
from specguard.report.render.canary_markdown import fmt_p
from specguard.report.render.html import chart_div, render_page

__all__ = ["CHART_IDS", "render_canary_html"]

TEMPLATE = "canary.html.j2"
CHART_IDS = ("weight-over-time", "window-ratios")
MOVE_COLORS = {"rollback": "#c62828", "promote": "#2e7d32", "advance": "#1565c0", "pause": "#ef6c00", "resume": "#ef6c00"}


def weight_chart(data: CanaryReportData) -> str:
    fig = go.Figure()
    pts = data.weight
    fig.add_trace(
        go.Scatter(
            x=[p.time_iso for p in pts],
            y=[p.percent for p in pts],
            mode="lines",
            line={"shape": "hv", "color": "#ef553b"},
            name="candidate weight",
            text=[p.cause for p in pts],
            hovertemplate="%{x}<br>%{y} %<br>%{text}<extra></extra>",
        )
    )
    for move, color in MOVE_COLORS.items():
        marked = [p for p in pts if p.cause.endswith(f" {move}")]
        if marked:
            fig.add_trace(
                go.Scatter(
                    x=[p.time_iso for p in marked],
                    y=[p.percent for p in marked],
                    mode="markers",
                    marker={"color": color, "size": 10},
                    name=move,
                )
            )
    fig.update_layout(title="Candidate weight over time (UTC)", yaxis={"title": "% of traffic", "range": [0, 105]})
    return chart_div(fig, CHART_IDS[0])


def ratio_chart(data: CanaryReportData) -> str:
    fig = go.Figure()
    series: dict[tuple[str, str], list[tuple[int, float | None, float | None, float | None]]] = {}
    for w in data.windows:
        for r in w.results:
            if r.metric != "error_rate":
                series.setdefault((r.segment, r.metric), []).append((w.look, r.ratio, r.ci_low, r.ci_high))
    palette = qualitative.Plotly
    for i, ((segment, metric), rows) in enumerate(series.items()):
        name, line = f"{segment} {metric}", {"color": palette[i % len(palette)], "width": 2}
        xs, ys = [x for x, *_ in rows], [y for _, y, _, _ in rows]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=name, legendgroup=name, marker={"color": line["color"]}))
        # each interval drawn as its own vertical segment: [lo, hi] at the window's look, None between them
        seg_x = [v for x, *_ in rows for v in (x, x, None)]
        seg_y = [v for _, _, lo, hi in rows for v in (lo, hi, None)]
        fig.add_trace(go.Scatter(x=seg_x, y=seg_y, mode="lines", showlegend=False, legendgroup=name, hoverinfo="skip", line=line))
    if not fig.data:
        fig.add_annotation(text="no window has a latency ratio yet", showarrow=False)
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "#888"})
    fig.update_layout(
        title="Per-window ratio candidate / baseline with 95 % interval", xaxis={"title": "window (look)", "dtick": 1}
    )
    return chart_div(fig, CHART_IDS[1])


def render_canary_html(data: CanaryReportData) -> str:
    return render_page(
        TEMPLATE,
        d=data,
        charts=[weight_chart(data), ratio_chart(data)],
        fmt=fmt,
        fmt_p=fmt_p,
        fmt_percent=fmt_percent,
    )
