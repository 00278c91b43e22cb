"""The traffic profile of a request log: rate over time, concurrency, sampling mix, lengths.

Accumulators take one request at a time and keep compact arrays (a few bytes
a request), so a large log streams through in flat memory.
"""

from __future__ import annotations

import math
from array import array
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


def distribution(values: array | list[float]) -> Distribution:
    if not len(values):
        return Distribution(count=0)
    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Distribution(count=len(a), mean=float(a.mean()), p50=float(p50), p90=float(p90), p99=float(p99),
                        max=float(a.max()))


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


def temperature_bucket(t: float | None) -> str:
    if t is None:
        return "unset (server default 1.0)"
    if t == 0:
        return "0 (greedy)"
    if t <= 0.3:
        return "(0, 0.3]"
    if t <= 0.7:
        return "(0.3, 0.7]"
    return "above 0.7"


def _top_p_bucket(p: float | None) -> str:
    if p is None or p == 1:
        return "1 (unset or off)"
    return "[0.9, 1)" if p >= 0.9 else "below 0.9"


class ProfileBuilder:
    def __init__(self) -> None:
        self.n = 0
        self.starts = array("d")
        self.ends = array("d")
        self.prompt_lens = array("i")
        self.output_lens = array("i")
        self.temps: Counter[str] = Counter()
        self.top_ps: Counter[str] = Counter()

    def add(self, start_s: float | None, e2e_s: float | None, temperature: float | None, top_p: float | None,
            prompt_len: int | None, output_len: int | None) -> None:
        self.n += 1
        if start_s is not None:
            self.starts.append(start_s)
            self.ends.append(start_s + e2e_s if e2e_s is not None else math.nan)
        self.temps[temperature_bucket(temperature)] += 1
        self.top_ps[_top_p_bucket(top_p)] += 1
        if prompt_len is not None:
            self.prompt_lens.append(prompt_len)
        if output_len is not None:
            self.output_lens.append(output_len)

    def _rate(self) -> RateProfile | None:
        if len(self.starts) < 2:
            return None
        t = np.asarray(self.starts)
        t0 = t.min()
        minutes = np.floor((t - t0) / 60).astype(int)
        counts = np.bincount(minutes) / 60.0
        span = max(t.max() - t0, 1e-9)
        return RateProfile(minutes=len(counts), per_minute_p50=float(np.percentile(counts, 50)),
                           per_minute_p95=float(np.percentile(counts, 95)), per_minute_peak=float(counts.max()),
                           mean_rps=float(len(t) / span))

    def _concurrency(self) -> ConcurrencyProfile:
        ends = np.asarray(self.ends)
        known = ~np.isnan(ends)
        if not known.any():
            return ConcurrencyProfile(source="no durations in the log")
        starts = np.asarray(self.starts)[known]
        ends = ends[known]
        events = np.concatenate([np.stack([starts, np.ones_like(starts)], 1), np.stack([ends, -np.ones_like(ends)], 1)])
        events = events[np.lexsort((events[:, 1], events[:, 0]))]  # at equal times, an end before a start
        level = np.cumsum(events[:, 1])
        times = events[:, 0]
        span = times[-1] - times[0]
        mean = float(np.sum(level[:-1] * np.diff(times)) / span) if span > 0 else float(level.max())
        return ConcurrencyProfile(source=f"start + e2e_s of {int(known.sum())} requests", mean=mean,
                                  peak=int(level.max()))

    def build(self) -> TrafficProfile:
        return TrafficProfile(requests=self.n, rate=self._rate(), concurrency=self._concurrency(),
                              temperature_mix=dict(self.temps), top_p_mix=dict(self.top_ps),
                              prompt_tokens=distribution(self.prompt_lens), output_tokens=distribution(self.output_lens))
