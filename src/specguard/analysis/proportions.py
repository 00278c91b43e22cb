"""Intervals of a proportion: shared by the error-rate guardrail (verdict/budget_tests) and the client's
read-lag warning (analysis/summarize), which both judge a share from a count."""

from __future__ import annotations

import math

__all__ = ["wilson_interval"]


def wilson_interval(errors: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion at normal quantile z."""
    if n <= 0:
        return 0.0, 1.0
    p = errors / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(centre - half, 0.0), min(centre + half, 1.0)
