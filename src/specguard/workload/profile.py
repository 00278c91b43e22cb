"""The traffic profile of a request log: rate over time, concurrency, sampling mix, lengths.

Accumulators take one request at a time and keep counters whose size does not
grow with the log (minutes, distinct lengths, requests in flight), so a large
log streams through in flat memory.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import Counter

import numpy as np
from pydantic import BaseModel, Field


class Distribution(BaseModel):
    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


def counted_distribution(counts: Counter[int]) -> Distribution:
    """Percentiles of a multiset kept as value -> count, equal to numpy's default (linear) on the expanded list."""
    n = sum(counts.values())
    if not n:
        return Distribution(count=0)
    values = sorted(counts)
    cumulative = list(itertools.accumulate(counts[v] for v in values))

    def nth(i: int) -> float:  # the i-th smallest (0-based) of the expanded list
        return float(values[bisect.bisect_right(cumulative, i)])

    def pct(q: float) -> float:
        rank = q / 100 * (n - 1)
        lo = math.floor(rank)
        return nth(lo) + (nth(min(lo + 1, n - 1)) - nth(lo)) * (rank - lo)

    mean = sum(v * c for v, c in counts.items()) / n
    return Distribution(count=n, mean=mean, p50=pct(50), p90=pct(90), p99=pct(99), max=float(values[-1]))


class RateProfile(BaseModel):
    minutes: int = Field(description="minutes from the first to the last request")
    per_minute_p50: float | None = Field(description="requests per second, median minute")
    per_minute_p95: float | None
    per_minute_peak: float | None
    mean_rps: float | None


class ConcurrencyProfile(BaseModel):
    source: str
    mean: float | None = None
    peak: int | None = None


class TrafficProfile(BaseModel):
    requests: int
    rate: RateProfile | None = Field(description="None when the log has no timestamps")
    concurrency: ConcurrencyProfile
    temperature_mix: dict[str, int]
    top_p_mix: dict[str, int]
    prompt_tokens: Distribution
    output_tokens: Distribution


# Temperature buckets: (label, upper bound, a representative temperature for a benchmark, "high" for Gate 1).
UNSET_BUCKET = ("unset (server default 1.0)", 1.0, True)
_BUCKETS = [
    ("0 (greedy)", 0.0, 0.0, False),
    ("(0, 0.3]", 0.3, 0.2, False),
    ("(0.3, 0.7]", 0.7, 0.7, False),
    ("above 0.7", math.inf, 1.0, True),
]


def temperature_bucket(t: float | None) -> str:
    if t is None:
        return UNSET_BUCKET[0]
    return next(label for label, upper, _, _ in _BUCKETS if t <= upper)


def bucket_temperature(label: str) -> float:
    """A temperature that stands for a bucket, for a benchmark's production sampling setting."""
    return next((rep for name, _, rep, _ in _BUCKETS if name == label), UNSET_BUCKET[1])


def high_temperature_share(mix: dict[str, int]) -> float:
    """Share of requests sampled above 0.7 or at the server default (1.0)."""
    hot = {name for name, _, _, is_hot in _BUCKETS if is_hot} | {UNSET_BUCKET[0]}
    total = sum(mix.values())
    return sum(n for label, n in mix.items() if label in hot) / total if total else 0.0


def _top_p_bucket(p: float | None) -> str:
    if p is None or p == 1:
        return "1 (unset or off)"
    return "[0.9, 1)" if p >= 0.9 else "below 0.9"


class ProfileBuilder:
    """Streams requests into counters whose size does not grow with the log: minutes, distinct lengths, and
    the requests in flight (a heap of end times, for logs in arrival order)."""

    def __init__(self) -> None:
        self.n = 0
        self.minutes: Counter[int] = Counter()
        self.prompt_lens: Counter[int] = Counter()
        self.output_lens: Counter[int] = Counter()
        self.temps: Counter[str] = Counter()
        self.top_ps: Counter[str] = Counter()
        self.first_start: float | None = None
        self.last_start = -math.inf
        self.in_order = True
        self.timed = 0
        self.busy_s = 0.0
        self.window = (math.inf, -math.inf)
        self.in_flight: list[float] = []
        self.peak = 0

    def add(
        self,
        start_s: float | None,
        e2e_s: float | None,
        temperature: float | None,
        top_p: float | None,
        prompt_len: int | None,
        output_len: int | None,
    ) -> None:
        self.n += 1
        self.temps[temperature_bucket(temperature)] += 1
        self.top_ps[_top_p_bucket(top_p)] += 1
        if prompt_len is not None:
            self.prompt_lens[prompt_len] += 1
        if output_len is not None:
            self.output_lens[output_len] += 1
        if start_s is None:
            return
        self.first_start = start_s if self.first_start is None else min(self.first_start, start_s)
        self.minutes[math.floor(start_s / 60)] += 1
        self.in_order &= start_s >= self.last_start
        self.last_start = max(self.last_start, start_s)
        if e2e_s is not None:
            self.timed += 1
            self.busy_s += e2e_s
            self.window = (min(self.window[0], start_s), max(self.window[1], start_s + e2e_s))
            while self.in_flight and self.in_flight[0] <= start_s:
                heapq.heappop(self.in_flight)
            heapq.heappush(self.in_flight, start_s + e2e_s)
            self.peak = max(self.peak, len(self.in_flight))

    def _rate(self) -> RateProfile | None:
        if sum(self.minutes.values()) < 2:
            return None
        lo, hi = min(self.minutes), max(self.minutes)
        per_minute = np.array([self.minutes.get(m, 0) for m in range(lo, hi + 1)], dtype=float) / 60.0
        span = max(self.last_start - (self.first_start or 0.0), 1e-9)
        return RateProfile(
            minutes=len(per_minute),
            per_minute_p50=float(np.percentile(per_minute, 50)),
            per_minute_p95=float(np.percentile(per_minute, 95)),
            per_minute_peak=float(per_minute.max()),
            mean_rps=float(sum(self.minutes.values()) / span),
        )

    def _concurrency(self) -> ConcurrencyProfile:
        if not self.timed:
            return ConcurrencyProfile(source="no durations in the log")
        span = self.window[1] - self.window[0]
        # The time integral of the number in flight is the sum of the durations (Little's law, exact).
        mean = self.busy_s / span if span > 0 else float(self.timed)
        if not self.in_order:
            return ConcurrencyProfile(source=f"e2e_s of {self.timed} requests; log not in arrival order, so no peak", mean=mean)
        return ConcurrencyProfile(source=f"start + e2e_s of {self.timed} requests", mean=mean, peak=self.peak)

    def build(self) -> TrafficProfile:
        return TrafficProfile(
            requests=self.n,
            rate=self._rate(),
            concurrency=self._concurrency(),
            temperature_mix=dict(self.temps),
            top_p_mix=dict(self.top_ps),
            prompt_tokens=counted_distribution(self.prompt_lens),
            output_tokens=counted_distribution(self.output_lens),
        )
