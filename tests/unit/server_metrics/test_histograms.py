"""Histograms from exposition text written by prometheus_client itself, their deltas and quantiles."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from specguard.server_metrics.histograms import histogram_delta, histogram_quantile, parse_histograms

BOUNDS = (0.01, 0.025, 0.05, 0.1)


def _page(values_by_engine: dict[str, list[float]], name: str = "vllm:inter_token_latency_seconds") -> str:
    registry = CollectorRegistry()
    h = Histogram(name, "itl", ["engine"], buckets=BOUNDS, registry=registry)
    for engine, values in values_by_engine.items():
        child = h.labels(engine=engine)
        for v in values:
            child.observe(v)
    return generate_latest(registry).decode()


def test_label_sets_are_summed_and_the_newest_name_wins():
    page = _page({"0": [0.005, 0.02], "1": [0.2]}) + _page({"0": [0.5] * 7}, "vllm:time_per_output_token_seconds")
    itl = parse_histograms(page)["itl"]
    assert itl.bounds == [*BOUNDS, math.inf]
    assert itl.cumulative == [1, 2, 2, 2, 3] and itl.count == 3 and itl.sum == pytest.approx(0.225)


def test_a_delta_is_what_was_observed_between_two_reads_and_a_restart_gives_none():
    before = parse_histograms(_page({"0": [0.005]}))["itl"]
    after = parse_histograms(_page({"0": [0.005, 0.03, 0.04]}))["itl"]
    delta = histogram_delta(before, after)
    assert delta is not None and delta.cumulative == [0, 0, 2, 2, 2] and delta.count == 2
    assert histogram_delta(after, before) is None


def test_quantiles_interpolate_inside_the_bucket_as_promql_does():
    h = parse_histograms(_page({"0": [0.03] * 4 + [0.07] * 4}))["itl"]
    # rank 4 of 8 ends the (0.025, 0.05] bucket; rank 6 is half-way through (0.05, 0.1]
    assert histogram_quantile(h, 0.5) == pytest.approx(0.05)
    assert histogram_quantile(h, 0.75) == pytest.approx(0.075)
    # a rank in the first bucket interpolates from 0
    low = parse_histograms(_page({"0": [0.001] * 4}))["itl"]
    assert histogram_quantile(low, 0.5) == pytest.approx(0.005)
    # a rank in the +Inf bucket gives the highest finite bound
    high = parse_histograms(_page({"0": [1.0] * 4}))["itl"]
    assert histogram_quantile(high, 0.99) == pytest.approx(0.1)
    assert histogram_quantile(parse_histograms(_page({"0": []}))["itl"], 0.5) is None
