"""CSV of a run's summary, for spreadsheets and the tools operators already have. Pure.

One row per distribution (TTFT, per-token ITL, TPOT, E2E, inter-chunk latency, tokens per chunk, send lag,
event-loop lag) with count, mean, p50, p90, p95, p99 and max in the summary's units (ms, or tokens), then
one row per scalar (requests, errors, error rate, output tokens/s); an absent value is an empty cell.
"""

from __future__ import annotations

import csv
import io

from specguard.results.models import Percentiles, Summary

__all__ = ["summary_csv", "CSV_COLUMNS"]

CSV_COLUMNS = ("metric", "count", "mean", "p50", "p90", "p95", "p99", "max", "value")
_SCALARS = ("requests", "errors", "error_rate", "request_rate", "output_tokens", "output_tokens_per_s", "duration_s")


def summary_csv(summary: Summary) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for name in type(summary).model_fields:
        value = getattr(summary, name)
        if isinstance(value, Percentiles):
            w.writerow(
                [
                    name,
                    value.count,
                    *("" if v is None else v for v in (value.mean, value.p50, value.p90, value.p95, value.p99, value.max)),
                    "",
                ]
            )
    for name in _SCALARS:
        w.writerow([name, "", "", "", "", "", "", "", getattr(summary, name)])
    return buf.getvalue()
