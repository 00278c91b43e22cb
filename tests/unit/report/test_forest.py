"""The evidence first: a forest plot of every cell's ratios with their lines, and a banner naming the deciding cells."""

from __future__ import annotations

import json
import re

from specguard.check.report import build_report_data
from specguard.report.build.forest import deciding_cells, deciding_line, forest
from specguard.report.render.html import render_html
from specguard.report.render.markdown import render_markdown
from specguard.report.render.verdict_terminal import render_terminal
from specguard.verdict import Reason
from tests.unit.report.test_numbers import cell, ratio
from tests.unit.report.test_report import make_check

BUDGETS = {"P99 E2E": 0.2, "P99 TTFT": 0.25}


def test_one_row_per_cell_and_metric_held_to_its_line():
    a = cell(ratio(0.7, 0.6, 0.8))
    b = cell(ratio(0.95, 0.8, 1.1)).model_copy(update={"traffic": "burst", "target": False})
    reasons = [
        Reason(code="guardrail_unresolved", cell=b.name, metric="P99 TTFT", text="straddles"),
        Reason(code="objective_undersampled", cell=a.name, metric="p95 itl_ms", text="too few", secondary=True),
    ]
    f = forest([a, b], "p95 itl_ms", False, 0.1, BUDGETS, reasons)
    assert f.metrics == ["p95 itl_ms", "P99 E2E", "P99 TTFT"]
    assert f.limits == {"p95 itl_ms": 0.9, "P99 E2E": 1.2, "P99 TTFT": 1.25}
    assert len(f.rows) == 6 and {(r.cell, r.metric) for r in f.rows} == {(c.name, m) for c in (a, b) for m in f.metrics}
    # only the first-rank reason decides: an "also:" reason does not
    assert [(r.cell, r.metric) for r in f.rows if r.deciding] == [(b.name, "P99 TTFT")]
    objective_a = next(r for r in f.rows if r.cell == a.name and r.metric == "p95 itl_ms")
    assert (objective_a.ratio, objective_a.ci_low, objective_a.ci_high, objective_a.target) == (0.7, 0.6, 0.8, True)
    # a higher-is-better objective is held to 1 + the minimum
    assert forest([a], "goodput rate", True, 0.1, BUDGETS, []).limits["goodput rate"] == 1.1


def test_the_deciding_line_names_cells_and_metrics_in_the_reasons_order():
    reasons = [
        Reason(code="guardrail_regressed", cell="burst / greedy / chat", metric="P99 TTFT", text="x"),
        Reason(code="error_rate_rose", cell="burst / greedy / chat", metric="error_rate", text="x"),
        Reason(code="objective_worse", cell="steady / greedy / chat", metric="p95 itl_ms", text="x"),
        Reason(code="go", metric="p95 itl_ms", text="no cell: not a deciding cell"),
    ]
    assert deciding_cells(reasons) == {
        "burst / greedy / chat": ["P99 TTFT", "error_rate"],
        "steady / greedy / chat": ["p95 itl_ms"],
    }
    assert (
        deciding_line(reasons) == "decided at burst / greedy / chat (P99 TTFT, error_rate); steady / greedy / chat (p95 itl_ms)"
    )
    assert deciding_line(reasons[3:]) is None


def _plotly_figure(html: str, div_id: str) -> dict:
    """The data and layout plotly.newPlot is given for one chart div."""
    m = re.search(rf'Plotly\.newPlot\(\s*"{div_id}",\s*(\[.*?\]),\s*(\{{.*?\}}),\s*\{{"displaylogo"', html, re.S)
    assert m, f"no chart {div_id}"
    return {"data": json.loads(m.group(1)), "layout": json.loads(m.group(2))}


def test_the_report_opens_with_the_forest_and_the_banner_names_the_deciding_cells(tmp_path):
    record, out = make_check(tmp_path / "c")
    data = build_report_data(record, out)
    v, f = data.verdict, data.charts.forest
    assert f is not None and {r.metric for r in f.rows} == {v.objective, "P99 E2E", "P99 TTFT"}
    line = deciding_line(v.reason_details)
    assert line is not None and "level steady (P99 E2E, P99 TTFT)" in line  # the level, named by its reasons
    html = render_html(data)
    assert f'<p id="deciding"><b>{line}</b></p>' in html
    # the forest is the first chart, right under the banner, before the tables
    assert html.index('id="forest"') < html.index('id="lines"') < html.index('id="latency-vs-load"')
    fig = _plotly_figure(html, "forest")
    drawn = sorted(round(x, 6) for t in fig["data"] for x in t["x"])
    assert drawn == sorted(round(r.ratio, 6) for r in f.rows)
    lines = sorted(round(s["x0"], 6) for s in fig["layout"]["shapes"])
    assert lines == sorted([1.0] * 3 + [round(x, 6) for x in f.limits.values()])  # no change, and each metric's line
    md = render_markdown(data)
    assert f"**{line}**" in md and md.index("## Evidence") < md.index("## Per traffic level")
    assert "- **forest plot**: one row per cell" in md and "- **ECDF**: empirical" in md  # the figures are defined
    assert line in render_terminal(v, "report.html")


def test_distributions_are_ecdfs_on_a_log_axis_with_the_tail_marked(tmp_path):
    record, out = make_check(tmp_path / "c")
    data = build_report_data(record, out)
    fig = _plotly_figure(render_html(data), "distributions")
    assert {t["type"] for t in fig["data"]} == {"scatter"}  # no box plot
    assert fig["layout"]["xaxis"]["type"] == fig["layout"]["xaxis2"]["type"] == "log"
    for d in data.charts.distributions:
        e = d.itl_ecdf
        assert e is not None and e.n == len(d.itl_ms) and e.y[-1] == 1.0
        marks = next(t for t in fig["data"] if t["mode"] == "markers+text" and t["legendgroup"] == d.arm)
        assert marks["x"] == [e.p95, e.p99]


def test_the_ecdf_keeps_every_value_of_the_tail_and_thins_the_body():
    import numpy as np

    from specguard.check.series import ECDF_BODY_POINTS, ecdf

    values = np.random.default_rng(1).lognormal(0, 1, 50_000)
    e = ecdf(values.tolist())
    assert e is not None and e.n == 50_000
    assert len(e.x) <= ECDF_BODY_POINTS + 500 + 1  # the top 1 % is 500 values
    top = np.sort(values)[-500:]
    assert np.allclose(e.x[-500:], top) and e.y[-1] == 1.0
    assert all(a <= b for a, b in zip(e.x, e.x[1:])) and all(a < b for a, b in zip(e.y, e.y[1:]))
    assert (e.p95, e.p99) == tuple(np.percentile(values, [95, 99]))
    assert ecdf([]) is None


def test_forest_rows_are_coloured_by_their_interval_and_the_deciding_ones_marked_apart():
    """Issue 29: a clear regression at a level no reason names was drawn black beside the red deciding rows."""
    from specguard.report.model.data import Forest, ForestRow
    from specguard.report.render.html import EFFECT_COLORS, forest_plot

    a = cell(ratio(0.7, 0.6, 0.8))
    b = cell(ratio(1.4, 1.2, 1.6)).model_copy(update={"traffic": "burst", "target": False})
    c = cell(ratio(1.0, 0.9, 1.1)).model_copy(update={"traffic": "idle", "target": False})
    reasons = [Reason(code="objective_worse", cell=b.name, metric="p95 itl_ms", text="worse")]
    f = forest([a, b, c], "p95 itl_ms", False, 0.1, {}, reasons)
    effects = {r.cell: r.effect for r in f.rows}
    assert effects == {a.name: "improvement", b.name: "regression", c.name: "neither"}
    # throughput: higher is better, so the same interval above 1 is an improvement
    assert forest([b], "output_tokens_per_s", True, 0.1, {}, []).rows[0].effect == "improvement"
    fig = _plotly_figure("<html>" + forest_plot(f), "forest")
    drawn = {y: t for t in fig["data"] for y in t["y"]}
    assert drawn[b.name]["marker"]["color"] == EFFECT_COLORS["regression"]
    assert drawn[f"{a.name} (target)"]["marker"]["color"] == EFFECT_COLORS["improvement"]
    assert drawn[c.name]["marker"]["color"] == EFFECT_COLORS["neither"]
    assert drawn[b.name]["marker"]["symbol"] == "diamond" and drawn[c.name]["marker"]["symbol"] == "circle"
    # a regression no reason names is red too, and not marked as deciding
    undecided = Forest.model_validate(
        f.model_dump() | {"rows": [r.model_copy(update={"deciding": False}) for r in f.rows if r.cell == b.name]}
    )
    (t,) = _plotly_figure("<html>" + forest_plot(undecided), "forest")["data"]
    assert t["marker"]["color"] == EFFECT_COLORS["regression"] and t["marker"]["symbol"] == "circle"
    assert isinstance(f.rows[0], ForestRow)
