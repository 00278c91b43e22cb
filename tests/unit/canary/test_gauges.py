"""A window's gauges computed once (``evidence.gauges.pool_gauges``): from each server's reads (the proxy's path)
and from the pool's summed points (behind an engine) the figures agree, and a restarted server adds no
negative preemptions or tokens."""

from __future__ import annotations

from specguard.canary.evidence.gauges import pool_gauges
from specguard.canary.evidence.metrics_source import PoolPoint
from specguard.results.models import MetricsSample


def read(t: float, waiting: float, preemptions: float, drafted: float, accepted: float) -> MetricsSample:
    counters = {"preemptions": preemptions, "spec_draft_tokens": drafted, "spec_accepted_tokens": accepted}
    return MetricsSample(t_s=t, phase="during", ok=True, gauges={"requests_waiting": waiting}, counters=counters)


def test_per_server_reads_and_the_pools_points_give_the_same_figures() -> None:
    a = [read(0, 2, 1, 0, 0), read(1, 4, 3, 40, 10)]
    b = [read(0, 6, 0, 10, 5), read(1, 8, 4, 50, 25)]
    points = [
        PoolPoint(
            t_s=x.t_s,
            gauges={"requests_waiting": (x.gauges["requests_waiting"] + y.gauges["requests_waiting"]) / 2},
            counters={c: x.counters[c] + y.counters[c] for c in x.counters},
        )
        for x, y in zip(a, b, strict=True)
    ]
    per_server = pool_gauges({"candidate": [a, b]})
    pooled = pool_gauges({"candidate": [points]})
    assert per_server == pooled
    gauges, rates = per_server
    assert gauges["candidate"] == {"requests_waiting": 5.0, "preemptions": 6.0}
    assert rates["candidate"] == (10 + 20) / (40 + 40)


def test_a_counter_that_fell_adds_nothing() -> None:
    gauges, rates = pool_gauges({"candidate": [[read(0, 1, 9, 100, 50), read(1, 1, 0, 4, 1)]]})
    assert "preemptions" not in gauges["candidate"] and rates["candidate"] is None
