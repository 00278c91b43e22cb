"""vLLM's latency histograms as the server exposes them, their window deltas and their quantiles. Pure.

Behind HAProxy or a Gateway, specguard sees no request of the pools itself; what it has are the servers'
own histograms (``names.HISTOGRAMS``: TTFT, ITL, E2E, TPOT), read from ``/metrics`` or from Prometheus.
A window's distribution is the difference of two cumulative reads. Its quantiles follow PromQL's
``histogram_quantile`` exactly (linear interpolation inside the bucket, 0 as the lower edge of the first,
the highest finite bound when the rank falls in the +Inf bucket), so that a figure specguard reports
equals what an operator's dashboard shows for the same window.

Note the resolution: vLLM 0.32's ITL buckets (``vllm/v1/metrics/buckets.py``) are 0.01, 0.025, 0.05, 0.075,
0.1 s and wider above, so a quantile read from them is a bucket-interpolated estimate, not a sample quantile;
the report says so.
"""

from __future__ import annotations

import math
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families
from pydantic import Field

from specguard.models_base import StrictModel
from specguard.server_metrics import names
from specguard.server_metrics.parse import MetricsParseError

__all__ = ["Histogram", "histogram_delta", "histogram_quantile", "merge_histograms", "parse_histograms"]


class Histogram(StrictModel):
    """One histogram, summed over its label sets: cumulative counts per upper bound (``le``), +Inf last."""

    bounds: list[float] = Field(description="ascending upper bounds in seconds; the last is +Inf")
    cumulative: list[float] = Field(description="observations <= each bound")
    sum: float = Field(description="sum of the observed values, seconds")
    count: float = Field(description="number of observations")


def merge_histograms(parts: list[Histogram]) -> Histogram | None:
    """The sum of histograms with the same bounds (servers of one pool); None when the bounds differ."""
    if not parts:
        return None
    bounds = parts[0].bounds
    if any(p.bounds != bounds for p in parts):
        return None
    return Histogram(
        bounds=list(bounds),
        cumulative=[sum(p.cumulative[i] for p in parts) for i in range(len(bounds))],
        sum=sum(p.sum for p in parts),
        count=sum(p.count for p in parts),
    )


def parse_histograms(text: str) -> dict[str, Histogram]:
    """Canonical name (``names.HISTOGRAMS``) -> histogram, the newest exposed name winning, label sets summed.

    Raises MetricsParseError on text that is not Prometheus exposition.
    """
    exposed_rank = {name: (canonical, rank) for canonical, ns in names.HISTOGRAMS.items() for rank, name in enumerate(ns)}
    # (canonical, rank) -> label set -> {le: count} / sum / count
    buckets: dict[tuple[str, int], dict[tuple[tuple[str, str], ...], dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    sums: dict[tuple[str, int], float] = defaultdict(float)
    counts: dict[tuple[str, int], float] = defaultdict(float)
    try:
        for family in text_string_to_metric_families(text):
            key = exposed_rank.get(family.name)
            if key is None or family.type != "histogram":
                continue
            for s in family.samples:
                if s.name.endswith("_bucket"):
                    labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                    buckets[key][labels][float(s.labels["le"])] = s.value
                elif s.name.endswith("_sum"):
                    sums[key] += s.value
                elif s.name.endswith("_count"):
                    counts[key] += s.value
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise MetricsParseError(f"unparsable /metrics text: {exc}") from exc
    best: dict[str, int] = {}
    for canonical, rank in buckets:
        best[canonical] = min(rank, best.get(canonical, rank))
    out: dict[str, Histogram] = {}
    for canonical, rank in best.items():
        parts = [
            Histogram(bounds=sorted(by_le), cumulative=[by_le[b] for b in sorted(by_le)], sum=0.0, count=0.0)
            for by_le in buckets[(canonical, rank)].values()
        ]
        merged = merge_histograms(parts)
        if merged is not None:
            out[canonical] = merged.model_copy(update={"sum": sums[(canonical, rank)], "count": counts[(canonical, rank)]})
    return out


def histogram_delta(before: Histogram, after: Histogram) -> Histogram | None:
    """What was observed between two reads; None when the bounds changed or a count fell (a restart)."""
    if before.bounds != after.bounds:
        return None
    cumulative = [a - b for a, b in zip(after.cumulative, before.cumulative, strict=True)]
    if any(c < 0 for c in cumulative) or after.count < before.count:
        return None
    return Histogram(
        bounds=list(after.bounds), cumulative=cumulative, sum=after.sum - before.sum, count=after.count - before.count
    )


def histogram_quantile(h: Histogram, q: float) -> float | None:
    """PromQL's ``histogram_quantile(q, ...)`` of one histogram; None when it holds no observation."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} outside [0, 1]")
    if not h.cumulative or h.cumulative[-1] <= 0 or len(h.bounds) < 2 or not math.isinf(h.bounds[-1]):
        return None
    total = h.cumulative[-1]
    rank = q * total
    for i, (bound, cum) in enumerate(zip(h.bounds, h.cumulative, strict=True)):
        if cum >= rank:
            if math.isinf(bound):
                return h.bounds[-2]
            lower = 0.0 if i == 0 else h.bounds[i - 1]
            below = 0.0 if i == 0 else h.cumulative[i - 1]
            in_bucket = cum - below
            if in_bucket <= 0:
                return bound
            return lower + (bound - lower) * (rank - below) / in_bucket
    return h.bounds[-2]
