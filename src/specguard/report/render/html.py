"""report.html: one self-contained file (plotly.js inlined, no network) with the verdict and its evidence.

A pure function of ``ReportData``: it reads no run directory and computes no figure. The page shell
(styles, inlined plotly.js: templates/page.html.j2), ``chart_div`` and ``render_page`` are shared with the
canary's report (canary_html.py), so both pages embed plotly the same way.
"""

from __future__ import annotations

import math
from pathlib import Path

import jinja2
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from specguard.number_format import fmt, fmt_percent, fmt_ratio, fmt_ratio_ci, fmt_samples
from specguard.report.build import greedy_table
from specguard.report.build.forest import deciding_line
from specguard.report.model.data import ArmDistribution, Charts, Ecdf, EquivalenceTable, Forest, ReportData
from specguard.report.render import gpu_table
from specguard.report.render.markdown import IMPORTED_NOTE, pinned_line
from specguard.report.render.reasons import LOOK_HEADER, LOOKS_METHOD, grouped_reasons, look_rows
from specguard.simulated import SIMULATED_NOTE, SIMULATED_SERVER_BANNER

__all__ = ["CHART_IDS", "COLORS", "TEMPLATES", "chart_div", "render_html", "render_page"]

# the check page's charts, in the order drawn; the Chromium test finds each by its id
CHART_IDS = ("forest", "latency-vs-load", "distributions", "acceptance", "server-gauges", "gpu-panels")

COLORS = {"baseline": "#636efa", "candidate": "#ef553b", "control": "#00cc96"}
EFFECT_COLORS = {"regression": "#c62828", "improvement": "#2e7d32", "neither": "#9e9e9e"}
TEMPLATES = Path(__file__).with_name("templates")
TEMPLATE = TEMPLATES / "report.html.j2"


def chart_div(fig: go.Figure, name: str, height: int = 360) -> str:
    """One chart as a ``<div id=name>`` that draws itself with the page's inlined plotly.js."""
    fig.update_layout(template="plotly_white", height=height, margin={"l": 50, "r": 20, "t": 50, "b": 40})
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=name, config={"displaylogo": False}))


def render_page(template: str, **context: object) -> str:
    """A template under templates/ (extending page.html.j2) rendered with plotly.js inlined: no network needed."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    return env.get_template(template).render(plotly_js=get_plotlyjs(), **context)


def _error_bars(values: list[float], ci: list[tuple[float, float]]) -> dict[str, object] | None:
    """Asymmetric error bars from each point's interval; None when the series has none (older report data)."""
    if len(ci) != len(values):
        return None
    up = [max(hi - v, 0.0) if math.isfinite(hi) else 0.0 for v, (_, hi) in zip(values, ci, strict=True)]
    down = [max(v - lo, 0.0) if math.isfinite(lo) else 0.0 for v, (lo, _) in zip(values, ci, strict=True)]
    return {"type": "data", "symmetric": False, "array": up, "arrayminus": down, "thickness": 1}


LOAD_AXES = {True: "offered load (requests/s)", False: "offered load (requests in flight)"}


def _load_rows(c: Charts) -> list[bool | None]:
    """The chart's rows by the unit of their x: requests/s (True), requests in flight (False), apart when a plan has
    both (one axis for both drew a rate of 8 beside a concurrency of 8 as the same load); None: older data, unknown."""
    if not any(s.traffic for s in c.load_series):
        return [None]
    kinds = {t in c.rate_levels for s in c.load_series for t in s.traffic}
    return [k for k in (True, False) if k in kinds] or [None]


def latency_vs_load(c: Charts) -> str:
    """Both arms over offered load, each point with its 95% interval; each crossover's bracket shaded and named.

    Rate levels and concurrency levels are drawn in rows of their own, each axis saying its unit; a crossover's
    label is an annotation of its own (a shape's empty one showed plotly's placeholder "new text"), one per bracket,
    each a line lower than the one before so that two labels never overlap.
    """
    rows = _load_rows(c)
    units = {None: "", True: " (requests/s)", False: " (in flight)"}
    titles = [t + units[kind] for kind in rows for t in (c.objective_title, "p99 e2e_ms")]
    fig = make_subplots(rows=len(rows), cols=2, subplot_titles=titles)
    for s in c.load_series:
        line = {"color": COLORS[s.arm], "dash": "solid" if s.arm == "candidate" else "dot"}
        name = f"{s.arm} {s.sampling}/{s.segment}"
        x: list[float] | list[str] = s.load if len(s.load) == len(s.x) else s.x
        for row, kind in enumerate(rows, start=1):
            idx = [i for i in range(len(s.x)) if kind is None or (s.traffic[i] in c.rate_levels) == kind]
            if not idx:
                continue
            hover = "%{text}: %{y:.2f}<extra>" + name + "</extra>"
            common = {
                "x": [x[i] for i in idx],
                "text": [s.x[i] for i in idx],
                "hovertemplate": hover,
                "line": line,
                "legendgroup": s.arm,
                "mode": "lines+markers",
            }
            objective, p99 = [s.objective[i] for i in idx], [s.p99_e2e[i] for i in idx]
            objective_ci = [s.objective_ci[i] for i in idx] if len(s.objective_ci) == len(s.x) else []
            p99_ci = [s.p99_e2e_ci[i] for i in idx] if len(s.p99_e2e_ci) == len(s.x) else []
            first = row == 1
            fig.add_trace(
                go.Scatter(y=objective, name=name, showlegend=first, error_y=_error_bars(objective, objective_ci), **common),
                row,
                1,
            )
            fig.add_trace(go.Scatter(y=p99, showlegend=False, error_y=_error_bars(p99, p99_ci), **common), row, 2)
    brackets: dict[tuple[float, float, int], list[str]] = {}
    for cross in c.crossovers:
        kind = cross.unpaid_traffic in c.rate_levels
        if rows != [None] and kind != (cross.paid_traffic in c.rate_levels):
            continue  # a bracket from a rate to a concurrency has no place on either axis; the verdict's text says it
        row = rows.index(kind) + 1 if kind in rows else 1
        brackets.setdefault((cross.paid_load, cross.unpaid_load, row), []).append(f"{cross.sampling}/{cross.segment}")
    labels_in_row: dict[int, int] = {}
    for (paid, unpaid, row), groups in brackets.items():
        i = labels_in_row[row] = labels_in_row.get(row, -1) + 1
        for col in (1, 2):
            fig.add_vrect(x0=paid, x1=unpaid, fillcolor="#f5b041", opacity=0.25, line_width=0, row=row, col=col)
        fig.add_annotation(
            x=paid,
            y=1,
            xref=f"x{2 * row - 1 if row > 1 else ''}",
            yref=f"y{2 * row - 1 if row > 1 else ''} domain",
            text=f"crossover {', '.join(groups)}: {paid:g} to {unpaid:g}",
            showarrow=False,
            xanchor="left",
            yanchor="top",
            yshift=-16 * i,  # one line below the label before it
        )
    fig.update_layout(title="Latency versus offered load (95% intervals; a crossover's bracket shaded)")
    for row, kind in enumerate(rows, start=1):
        fig.update_xaxes(
            title_text="offered load (requests/s, or requests in flight)" if kind is None else LOAD_AXES[kind], row=row
        )
    return chart_div(fig, "latency-vs-load", height=360 * len(rows))


def _row_label(cell: str, target: bool) -> str:
    return f"{cell} (target)" if target else cell


def forest_plot(f: Forest | None) -> str:
    """One panel per metric (the objective, then each ratio guardrail), one row per cell: the ratio and its 95 %
    interval, x = 1 dotted, the minimum improvement or budget dashed. A row's colour is what its interval says
    (regression red, improvement green, neither grey), wherever it is; the rows the verdict names are large
    outlined diamonds: a clear regression at a level no reason names was drawn black beside red deciding rows."""
    fig = make_subplots(
        rows=1,
        cols=max(len(f.metrics), 1) if f else 1,
        shared_yaxes=True,
        subplot_titles=[f"{m}: {f.limit_labels[m]}" for m in f.metrics] if f else None,
    )
    if f is None or not f.rows:
        fig.add_annotation(text="no cell has a ratio with an interval", showarrow=False)
        return chart_div(fig, "forest")
    labels = list(dict.fromkeys(_row_label(r.cell, r.target) for r in f.rows))
    shown: set[str] = set()  # one legend entry per colour and mark, not per panel
    for col, metric in enumerate(f.metrics, start=1):
        rows = [r for r in f.rows if r.metric == metric]
        for effect in EFFECT_COLORS:
            for deciding in (False, True):
                sel = [r for r in rows if r.deciding == deciding and r.effect == effect]
                if not sel:
                    continue
                name = f"{effect}{', named by the verdict' if deciding else ''}"
                fig.add_trace(
                    go.Scatter(
                        x=[r.ratio for r in sel],
                        y=[_row_label(r.cell, r.target) for r in sel],
                        mode="markers",
                        marker={
                            "color": EFFECT_COLORS[effect],
                            "size": 13 if deciding else 9,
                            "symbol": "diamond" if deciding else "circle",
                            "line": {"color": "#000", "width": 2 if deciding else 0},
                        },
                        error_x={
                            "type": "data",
                            "symmetric": False,
                            "array": [r.ci_high - r.ratio for r in sel],
                            "arrayminus": [r.ratio - r.ci_low for r in sel],
                            "color": EFFECT_COLORS[effect],
                        },
                        text=[fmt_ratio_ci(r.ratio, r.ci_low, r.ci_high) for r in sel],
                        hovertemplate="%{y}<br>%{text}<extra>" + metric + "</extra>",
                        name=name,
                        legendgroup=name,
                        showlegend=name not in shown,
                    ),
                    1,
                    col,
                )
                shown.add(name)
        fig.add_vline(x=1.0, line={"dash": "dot", "color": "#888"}, row=1, col=col)
        fig.add_vline(x=f.limits[metric], line={"dash": "dash", "color": "#ef6c00"}, row=1, col=col)
        fig.update_xaxes(title_text="candidate / baseline", row=1, col=col)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(labels)))
    fig.update_layout(title="Evidence: ratio candidate / baseline per cell, 95 % interval (dashed: the line it is held to)")
    height = max(260, 110 + 34 * len(labels))
    return chart_div(fig, "forest", height=height)


def _ecdf_traces(fig: go.Figure, d: ArmDistribution, e: Ecdf | None, col: int) -> None:
    if e is None:
        return
    color = COLORS[d.arm]
    fig.add_trace(
        go.Scatter(
            x=e.x,
            y=e.y,
            mode="lines",
            line={"color": color, "shape": "hv"},
            name=f"{d.arm} (n={e.n})",
            showlegend=col == 1,
            legendgroup=d.arm,
        ),
        1,
        col,
    )
    marks = [(name, q, v) for name, q, v in (("p95", 0.95, e.p95), ("p99", 0.99, e.p99)) if v is not None]
    fig.add_trace(
        go.Scatter(
            x=[v for *_, v in marks],
            y=[q for _, q, _ in marks],
            mode="markers+text",
            text=[f"{name} {v:.3g}" for name, _, v in marks],
            textposition="middle left" if d.arm == "baseline" else "middle right",
            marker={"color": color, "size": 8, "symbol": "line-ns-open", "line": {"width": 2, "color": color}},
            showlegend=False,
            legendgroup=d.arm,
            hoverinfo="text",
        ),
        1,
        col,
    )


def distributions(c: Charts) -> str:
    """ECDFs on a log axis, body and tail both visible, with the p95 and p99 of each arm marked."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("per-token ITL (ms)", "TPOT (ms)"))
    for d in c.distributions:
        _ecdf_traces(fig, d, d.itl_ecdf, 1)
        _ecdf_traces(fig, d, d.tpot_ecdf, 2)
    if not any(d.itl_ecdf or d.tpot_ecdf for d in c.distributions):
        fig.add_annotation(text="no request produced two tokens", showarrow=False)
    fig.update_xaxes(type="log")
    fig.update_yaxes(title_text="fraction of values <= x", range=[0, 1.02], row=1, col=1)
    fig.update_layout(title=f"Distributions at the target level '{c.target}' (all sampling settings): ECDF, log axis")
    return chart_div(fig, "distributions", height=420)


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
    return chart_div(fig, "acceptance")


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
    return chart_div(fig, "server-gauges")


def gpu_panels(c: Charts) -> str | None:
    """One row per arm: utilisation and memory used of each GPU over time; None when no arm sampled its GPUs."""
    if not c.gpu:
        return None
    titles = [f"{p.arm}: {what}" for p in c.gpu for what in ("GPU utilisation (%)", "GPU memory used (MiB)")]
    fig = make_subplots(rows=len(c.gpu), cols=2, subplot_titles=titles)
    for row, panel in enumerate(c.gpu, start=1):
        for t in panel.traces:
            line = {"color": COLORS[t.arm]}
            name = f"{t.arm} GPU {t.gpu}"
            fig.add_trace(go.Scatter(x=t.t_s, y=t.utilization_pct, name=name, line=line), row, 1)
            fig.add_trace(go.Scatter(x=t.t_s, y=t.memory_used_mib, name=name, showlegend=False, line=line), row, 2)
        if panel.reason is not None:
            for col in (1, 2):
                fig.add_annotation(text=f"not available: {panel.reason}", showarrow=False, row=row, col=col)
    fig.update_layout(title=f"GPUs over time (target level '{c.target}', first repetition)")
    return chart_div(fig, "gpu-panels", height=300 * len(c.gpu))


def _greedy_context(t: EquivalenceTable | None) -> dict[str, object] | None:
    """The greedy-output section's header, rows and notes as report.md shows them; None without the table."""
    if t is None:
        return None
    return {
        "absent": t.absent,
        "intro": greedy_table.equivalence_intro(t),
        "header": greedy_table.HEADER,
        "rows": [greedy_table.row_texts(r) for r in t.rows],
        "notes": greedy_table.equivalence_notes(t),
    }


def _gpu_context(c: Charts) -> dict[str, object]:
    return {
        "title": gpu_table.gpu_title(c.target),
        "not_sampled": None if c.gpu else gpu_table.NOT_SAMPLED,
        "header": gpu_table.HEADER,
        "rows": gpu_table.gpu_rows(c.gpu),
        "notes": gpu_table.gpu_notes(c.gpu),
    }


def render_html(data: ReportData) -> str:
    c = data.charts
    charts = [forest_plot(c.forest), latency_vs_load(c), distributions(c), acceptance(c), server_gauges(c)]
    gpu = gpu_panels(c)
    if gpu is not None:
        charts.append(gpu)
    return render_page(
        TEMPLATE.name,
        v=data.verdict,
        charts=charts,
        out=data.out,
        pinned_line=pinned_line,
        imported_note=IMPORTED_NOTE,
        simulated_banner=SIMULATED_SERVER_BANNER,
        simulated_note=SIMULATED_NOTE,
        deciding=deciding_line(data.verdict.reason_details),
        reasons=grouped_reasons(data.verdict),
        look_header=LOOK_HEADER,
        looks_method=LOOKS_METHOD,
        look_rows=look_rows(data.verdict.looks),
        fmt=fmt,
        fmt_ratio=fmt_ratio,
        fmt_ratio_ci=fmt_ratio_ci,
        fmt_percent=fmt_percent,
        fmt_samples=fmt_samples,
        greedy=_greedy_context(data.verdict.equivalence),
        gpu=_gpu_context(c),
    )
