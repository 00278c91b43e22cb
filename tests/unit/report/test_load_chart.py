"""The latency-versus-load chart: both arms with their intervals as error bars, a crossover's bracket shaded."""

from __future__ import annotations

from specguard.report.model.data import Charts, LoadSeries
from specguard.report.render.html import latency_vs_load
from specguard.verdict import Crossover


def test_load_chart_draws_intervals_and_marks_the_crossover():
    series = [
        LoadSeries(
            arm=arm,
            sampling="greedy",
            segment="chat",
            x=["sync (2)", "rate-1 (4)"],
            objective=[10.0, 12.0],
            p99_e2e=[100.0, 130.0],
            load=[2.0, 4.0],
            objective_ci=[(9.0, 11.5), (11.0, 13.0)],
            p99_e2e_ci=[(90.0, 110.0), (120.0, 140.0)],
        )
        for arm in ("baseline", "candidate")
    ]
    cross = Crossover(
        sampling="greedy",
        segment="chat",
        paid_traffic="sync",
        paid_load=2.0,
        unpaid_traffic="rate-1",
        unpaid_load=4.0,
        unpaid_status="worse",
    )
    charts = Charts(
        objective_title="p50 itl_ms",
        load_series=series,
        target="sync",
        distributions=[],
        acceptance=[],
        gauges=[],
        crossovers=[cross],
    )
    html = latency_vs_load(charts)
    assert '"arrayminus":[1.0,1.0]' in html.replace(" ", "")  # 10 - 9, 12 - 11
    assert "crossover greedy" in html and "chat: 2 to 4" in html
    assert '"x0":2.0' in html.replace(" ", "") and '"x1":4.0' in html.replace(" ", "")


def _figure(html: str, div_id: str) -> dict:
    from tests.unit.report.test_forest import _plotly_figure

    return _plotly_figure(html, div_id)


def _cross(segment: str, paid: float, unpaid: float, unpaid_traffic: str, paid_traffic: str = "qps2") -> Crossover:
    return Crossover(
        sampling="greedy",
        segment=segment,
        paid_traffic=paid_traffic,
        paid_load=paid,
        unpaid_traffic=unpaid_traffic,
        unpaid_load=unpaid,
        unpaid_status="worse",
    )


def test_rates_and_concurrencies_are_drawn_apart_and_every_crossover_label_has_text_of_its_own():
    """Issue 29: a rate of 8 and a concurrency of 8 were one x; an empty shape label showed plotly's "new text"; two
    labels at one corner overlapped."""
    series = [
        LoadSeries(
            arm=arm,
            sampling="greedy",
            segment=seg,
            x=["qps2 (2)", "qps8 (8)", "c8 (8)"],
            objective=[10.0, 12.0, 11.0],
            p99_e2e=[100.0, 130.0, 120.0],
            load=[2.0, 8.0, 8.0],
            traffic=["qps2", "qps8", "c8"],
        )
        for arm in ("baseline", "candidate")
        for seg in ("chat", "code")
    ]
    charts = Charts(
        objective_title="p50 itl_ms",
        load_series=series,
        target="qps2",
        distributions=[],
        acceptance=[],
        gauges=[],
        crossovers=[
            _cross("chat", 2, 8, "qps8"),
            _cross("code", 2, 8, "qps8"),
            _cross("prose", 1, 2, "qps2"),
            _cross("mixed", 2, 8, "c8"),  # from a rate to a concurrency: on neither axis
        ],
        rate_levels=["qps2", "qps8"],
    )
    fig = _figure("<html>" + latency_vs_load(charts), "latency-vs-load")
    layout = fig["layout"]
    assert layout["xaxis"]["title"]["text"] == "offered load (requests/s)"
    assert layout["xaxis3"]["title"]["text"] == "offered load (requests in flight)"
    # each trace holds one kind of level: the rate levels in row 1 (x, x2), the concurrency level in row 2 (x3, x4)
    for t in fig["data"]:
        assert t["text"] == (["c8 (8)"] if t["xaxis"] in ("x3", "x4") else ["qps2 (2)", "qps8 (8)"]), t
    labels = [a for a in layout["annotations"] if a["text"].startswith("crossover")]
    assert all(a.get("text") for a in layout["annotations"])  # no annotation without text ("new text")
    # one label per bracket (two groups with the same bracket share it), each a line below the one before
    assert [a["text"] for a in labels] == ["crossover greedy/chat, greedy/code: 2 to 8", "crossover greedy/prose: 1 to 2"]
    assert [a.get("yshift", 0) for a in labels] == [0, -16]
    assert len(layout["shapes"]) == 2 * 2  # two brackets, each shaded in both panels of its row
