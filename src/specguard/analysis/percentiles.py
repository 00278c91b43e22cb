"""Percentile summaries. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specguard.results.models import Percentiles


def percentiles(values: Sequence[float], scale: float = 1.0) -> Percentiles:
    """Mean, p50/p90/p95/p99 and max of ``values`` times ``scale``.

    Linear interpolation between order statistics (numpy's default), the same
    estimator ``vllm bench serve`` uses, so figures are comparable with it.
    """
    if len(values) == 0:
        return Percentiles(count=0, mean=None, p50=None, p90=None, p95=None, p99=None, max=None)
    arr = np.asarray(values, dtype=float) * scale
    p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
    return Percentiles(
        count=int(arr.size),
        mean=float(arr.mean()),
        p50=float(p50),
        p90=float(p90),
        p95=float(p95),
        p99=float(p99),
        max=float(arr.max()),
    )
