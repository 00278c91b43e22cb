"""A window's gauges, preemptions and spec-decode acceptance per pool, computed once for every source. Pure.

The proxy's path has each server's own ``/metrics`` reads (``MetricsSample``); the engines' path has each pool's
points from the metrics source (``PoolPoint``: direct scrapes summed over the servers, or Prometheus). Both are
series of readings with gauges and counters, and the figures come from the one function here:

- a gauge: its mean over every reading of the pool's series (the rollout's gauge budgets compare per server);
- preemptions: the counter's increase from each series' first to its last reading, summed over the series;
- acceptance: accepted over draft tokens, both increases summed over the series (vllm-facts.md 3.5), None
  without drafts.

A counter that fell within a series (the server restarted: vLLM's counters start at 0) adds nothing; the pool
watcher reports the restart itself as a critical event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from specguard.canary.spec.vocabulary import PoolName

__all__ = ["POOL_GAUGES", "Reading", "pool_gauges"]

# The gauges a pool is watched on: averaged per server over a window.
POOL_GAUGES: tuple[str, ...] = ("requests_waiting", "requests_running", "kv_cache_usage")


class Reading(Protocol):
    """One good read of a server or a pool: ``MetricsSample`` and ``PoolPoint`` both are."""

    @property
    def gauges(self) -> Mapping[str, float]: ...

    @property
    def counters(self) -> Mapping[str, float]: ...


def _increase(series: Sequence[Reading], name: str) -> float | None:
    """The counter's increase over the series; None with fewer than two readings, without it, or across a reset."""
    if len(series) < 2 or name not in series[0].counters or name not in series[-1].counters:
        return None
    delta = series[-1].counters[name] - series[0].counters[name]
    return delta if delta >= 0 else None


def pool_gauges(
    series_by_pool: Mapping[PoolName, Iterable[Sequence[Reading]]],
) -> tuple[dict[str, dict[str, float]], dict[str, float | None]]:
    """Per pool: each gauge's mean, the window's preemptions (when a series shows them), and the acceptance rate."""
    gauges: dict[str, dict[str, float]] = {}
    rates: dict[str, float | None] = {}
    for pool, all_series in series_by_pool.items():
        values: dict[str, list[float]] = {}
        preemptions: list[float] = []
        accepted = drafted = 0.0
        for series in all_series:
            for reading in series:
                for g in POOL_GAUGES:
                    if g in reading.gauges:
                        values.setdefault(g, []).append(reading.gauges[g])
            if (p := _increase(series, "preemptions")) is not None:
                preemptions.append(p)
            d, a = _increase(series, "spec_draft_tokens"), _increase(series, "spec_accepted_tokens")
            if d is not None and a is not None:
                drafted, accepted = drafted + d, accepted + a
        per = {g: sum(v) / len(v) for g, v in values.items() if v}
        if preemptions:
            per["preemptions"] = sum(preemptions)
        gauges[pool] = per
        rates[pool] = accepted / drafted if drafted > 0 else None
    return gauges, rates
