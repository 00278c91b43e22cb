"""Server failures from /metrics reads, window gauges, and the burst detector."""

from __future__ import annotations

from specguard.canary.evidence.pool_watch import BurstDetector, PoolReadings, server_failures, window_gauges
from specguard.results.models import MetricsSample


def read(t: float, **counters: float) -> MetricsSample:
    gauges = {"requests_waiting": counters.pop("waiting", 0.0), "kv_cache_usage": counters.pop("kv", 0.0)}
    return MetricsSample(t_s=t, phase="during", ok=True, gauges=gauges, counters=counters)


def gap(t: float, error: str) -> MetricsSample:
    return MetricsSample(t_s=t, phase="during", ok=False, error=error)


def test_a_server_that_stops_answering_has_crashed() -> None:
    before = read(1, generation_tokens=10)
    events = server_failures(
        "http://c", before, gap(2, "ClientConnectorError: Cannot connect to host 127.0.0.1:9 [Connection refused]")
    )
    assert [e.kind for e in events] == ["crash"] and events[0].server == "http://c"
    assert server_failures("http://c", None, gap(2, "Connection refused")) == [], "never seen up: not a crash (yet)"
    assert server_failures("http://c", before, gap(2, "TimeoutError: ")) == [], "a slow /metrics is no crash"


def test_counters_going_backwards_mean_a_restart() -> None:
    events = server_failures("http://c", read(1, generation_tokens=500), read(2, generation_tokens=3))
    assert [e.kind for e in events] == ["crash"] and "restarted" in events[0].detail
    assert server_failures("http://c", read(1, generation_tokens=5), read(2, generation_tokens=9)) == []


def test_window_gauges_average_per_server_and_pool_acceptance() -> None:
    readings = {
        "baseline": PoolReadings({"a": [read(0, waiting=2, kv=0.2, preemptions=1), read(1, waiting=4, kv=0.4, preemptions=3)]}),
        "candidate": PoolReadings(
            {
                "c": [
                    read(0, waiting=1, spec_drafts=0, spec_draft_tokens=0, spec_accepted_tokens=0),
                    read(1, waiting=1, spec_drafts=10, spec_draft_tokens=40, spec_accepted_tokens=10),
                ]
            }
        ),
    }
    gauges, acceptance = window_gauges(readings)
    assert gauges["baseline"]["requests_waiting"] == 3.0 and abs(gauges["baseline"]["kv_cache_usage"] - 0.3) < 1e-12
    assert gauges["baseline"]["preemptions"] == 2.0
    assert acceptance == {"baseline": None, "candidate": 0.25}


def test_bursts_count_within_a_sliding_window() -> None:
    d = BurstDetector(count=3, within_s=10.0)
    assert not d.add(0.0) and not d.add(5.0)
    assert not d.add(15.5), "the first two are older than 10 s by now"
    assert not d.add(16.0)
    assert d.add(17.0) and d.in_window == 3
