"""Simulated traffic: arrival times and prompt/output lengths. Pure (a seeded generator in, arrays out).

Arrivals are Poisson, gamma (shape < 1 is burstier than Poisson, as
``bench --arrival gamma --burstiness``), constant, or a trace of offsets.
Lengths are fixed, or drawn with replacement from observed pairs (a Gate 1
profile, a prompt file's token counts, or a ``bench`` run's requests).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field

ArrivalKind = Literal["poisson", "gamma", "constant", "trace"]


class Arrivals(BaseModel):
    kind: ArrivalKind = "poisson"
    burstiness: float = Field(default=1.0, gt=0, description="gamma shape; 1 is Poisson")
    trace_s: list[float] | None = Field(default=None, description="offsets in seconds (trace); scaled to the rate")


class Lengths(BaseModel):
    """(prompt, output) token pairs to draw from; one pair is a fixed workload."""

    pairs: list[tuple[int, int]] = Field(min_length=1)
    source: str = "fixed"

    @staticmethod
    def fixed(prompt_len: int, output_len: int) -> Lengths:
        return Lengths(pairs=[(prompt_len, output_len)], source=f"fixed {prompt_len}/{output_len} tokens")

    @property
    def mean_prompt(self) -> float:
        return float(np.mean([p for p, _ in self.pairs]))

    @property
    def mean_output(self) -> float:
        return float(np.mean([o for _, o in self.pairs]))


def arrival_times(arrivals: Arrivals, rate: float, duration_s: float, rng: np.random.Generator) -> NDArray[np.float64]:
    """Arrival offsets in [0, duration_s) at ``rate`` requests per second."""
    expected = int(rate * duration_s * 1.2) + 16
    if arrivals.kind == "constant":
        times = np.arange(0.0, duration_s, 1.0 / rate)
    elif arrivals.kind == "trace":
        trace = np.sort(np.asarray(arrivals.trace_s or [0.0], dtype=np.float64))
        span = max(trace[-1] - trace[0], 1e-9)
        # the trace's shape at the asked mean rate, repeated to fill the duration
        scale = (len(trace) / span) / rate if len(trace) > 1 else 1.0
        one = (trace - trace[0]) * scale
        period = one[-1] + 1.0 / rate
        reps = int(duration_s / period) + 1
        times = (one[None, :] + period * np.arange(reps)[:, None]).ravel()
    else:
        shape = 1.0 if arrivals.kind == "poisson" else arrivals.burstiness
        gaps = rng.gamma(shape, 1.0 / (rate * shape), expected)
        times = np.cumsum(gaps) - gaps[0]
        while times[-1] < duration_s:
            more = rng.gamma(shape, 1.0 / (rate * shape), expected)
            times = np.concatenate([times, times[-1] + np.cumsum(more)])
    return times[times < duration_s]


def draw_lengths(lengths: Lengths, n: int, rng: np.random.Generator) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    pairs = np.asarray(lengths.pairs, dtype=np.int64)
    idx = rng.integers(0, len(pairs), n) if len(pairs) > 1 else np.zeros(n, dtype=np.int64)
    return pairs[idx, 0], pairs[idx, 1]
