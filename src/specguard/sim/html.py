"""``sim run --html``: one self-contained page (plotly.js inlined, no network) on check's page shell.

A pure function of the finished ``SimReport``: three charts (latency versus rate for both arms, speed-up
versus rate with the 1.0 line and the crossover, the best k per batch-size band) and the tables of
templates/sim.html.j2. The page says SIMULATED in its title and at its top: its numbers are predictions.
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specguard.errors import OutputExistsError, OutputWriteError
from specguard.number_format import fmt, fmt_ratio
from specguard.report.render.html import COLORS, chart_div, render_page
from specguard.sim.render import band_line, crossover_line, metric_rows, prediction_note, setup_line
from specguard.sim.results import ArmMetrics, SimReport

__all__ = ["CHART_IDS", "render_sim_html", "write_sim_html"]

TEMPLATE = "sim.html.j2"
# the page's charts, in the order drawn; the Chromium test finds each by its id
CHART_IDS = ("latency-vs-rate", "speedup-vs-rate", "k-bands")
ARM_COLORS = {"baseline": COLORS["baseline"], "speculative": COLORS["candidate"]}
SPEEDUP_COLORS = {
    "e2e_ms": "#ef553b",
    "tpot_ms": "#00cc96",
    "itl_ms": "#ab63fa",
    "ttft_ms": "#ffa15a",
    "throughput_tokens_per_s": "#19d3f3",
}


def _arms(r: SimReport) -> list[tuple[str, list[tuple[float, ArmMetrics]]]]:
    arms = [("baseline", [(p.rate, p.baseline) for p in r.rates])]
    spec = [(p.rate, p.speculative) for p in r.rates if p.speculative is not None]
    if spec:
        arms.append(("speculative", spec))
    return arms


def latency_vs_rate(r: SimReport) -> str:
    """p50 (solid) and p99 (dotted) of E2E and TPOT per rate, both arms; a saturated arm's point is an x."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("E2E (ms)", "TPOT (ms)"))
    for arm, pts in _arms(r):
        symbols = ["x" if a.saturated else "circle" for _, a in pts]
        for col, key in ((1, "e2e_ms"), (2, "tpot_ms")):
            for pct, dash in (("p50", "solid"), ("p99", "dot")):
                fig.add_trace(
                    go.Scatter(
                        x=[x for x, _ in pts],
                        y=[getattr(getattr(a, key), pct) for _, a in pts],
                        mode="lines+markers",
                        name=f"{arm} {pct}",
                        legendgroup=f"{arm} {pct}",
                        showlegend=col == 1,
                        line={"color": ARM_COLORS[arm], "dash": dash},
                        marker={"symbol": symbols, "size": 9},
                        hovertemplate="%{x} req/s: %{y:.2f} ms<extra>" + f"{arm} {pct} {key}" + "</extra>",
                    ),
                    1,
                    col,
                )
    fig.update_xaxes(title_text="request rate (req/s)")
    fig.update_yaxes(title_text="ms", rangemode="tozero")
    fig.update_layout(title="SIMULATED latency versus request rate (solid p50, dotted p99; x: the arm fell behind)")
    return chart_div(fig, CHART_IDS[0])


def speedup_vs_rate(r: SimReport) -> str:
    """Each metric's p50 speed-up (as the report holds it) per rate, the 1.0 line, and the crossover rate marked."""
    fig = go.Figure()
    for key, color in SPEEDUP_COLORS.items():
        pts = [(p.rate, p.speedup[key]) for p in r.rates if key in p.speedup]
        if not pts:
            continue
        chosen = key == r.crossover_metric
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in pts],
                y=[y for _, y in pts],
                mode="lines+markers",
                name=key + (" (crossover metric)" if chosen else ""),
                line={"color": color, "width": 3 if chosen else 1.5},
                hovertemplate="%{x} req/s: x%{y:.3f}<extra>" + key + "</extra>",
            )
        )
    if not fig.data:
        fig.add_annotation(text="no speculative arm: nothing to compare", showarrow=False)
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "#888"}, annotation_text="1.0: no change")
    if r.crossover_rate is not None:
        fig.add_vline(
            x=r.crossover_rate,
            line={"dash": "dash", "color": "#c62828"},
            annotation_text=f"crossover {r.crossover_rate:g} req/s",
            annotation_position="top right",
        )
    fig.update_xaxes(title_text="request rate (req/s)")
    fig.update_yaxes(title_text="baseline / speculative (throughput: speculative / baseline)")
    fig.update_layout(title="SIMULATED speed-up versus request rate (above 1: speculation is faster)")
    return chart_div(fig, CHART_IDS[1])


def k_bands(r: SimReport) -> str:
    """One bar per band: its batch sizes along x, its best k up, its least decode-speed gain as the label."""
    fig = go.Figure()
    if r.k_schedule:
        fig.add_trace(
            go.Bar(
                x=[(b.start + b.end) / 2 for b in r.k_schedule],
                width=[b.end - b.start + 1 for b in r.k_schedule],
                y=[b.k for b in r.k_schedule],
                text=[f"k={b.k} ({fmt_ratio(b.tokens_per_s_gain)})" for b in r.k_schedule],
                hovertext=[band_line(b) for b in r.k_schedule],
                hoverinfo="text",
                marker={"color": COLORS["candidate"], "line": {"color": "white", "width": 1}},
                name="best k",
            )
        )
    else:
        fig.add_annotation(text="no speculative arm: no k schedule", showarrow=False)
    fig.update_xaxes(title_text="batch size (requests in the step)")
    fig.update_yaxes(title_text="best k", dtick=1, rangemode="tozero")
    fig.update_layout(title="SIMULATED best k per batch-size band (num_speculative_tokens_per_batch_size)", bargap=0)
    return chart_div(fig, CHART_IDS[2], height=320)


def _rate_rows(r: SimReport) -> list[list[str]]:
    return [[f"{p.rate:g}", *row] for p in r.rates for row in metric_rows(p)]


def render_sim_html(report: SimReport) -> str:
    return render_page(
        TEMPLATE,
        r=report,
        charts=[latency_vs_rate(report), speedup_vs_rate(report), k_bands(report)],
        note=prediction_note(),
        setup=setup_line(report),
        crossover=crossover_line(report),
        bands=[band_line(b) for b in report.k_schedule],
        config_json=json.dumps(report.k_schedule_config) if report.k_schedule_config is not None else None,
        rate_rows=_rate_rows(report),
        fmt=fmt,
    )


def write_sim_html(report: SimReport, path: Path, *, force: bool = False) -> Path:
    """The page at ``path``; an existing file is replaced only with ``force``."""
    if path.exists() and not force:
        raise OutputExistsError(f"--html: {path} already exists; pass --force to replace it")
    text = render_sim_html(report)
    try:
        path.write_text(text)
    except OSError as exc:
        raise OutputWriteError(f"{path}: cannot write the simulation report ({exc.strerror or exc})") from exc
    return path
