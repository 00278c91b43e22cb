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
