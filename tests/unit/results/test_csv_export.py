"""summary --csv: one row per distribution with its percentiles, then the scalars."""

from __future__ import annotations

import csv
import io

from specguard.analysis.summarize import summarize
from specguard.results.csv_export import CSV_COLUMNS, summary_csv
from specguard.results.models import RequestRecord


def record(i: int, ttft: float) -> RequestRecord:
    return RequestRecord(
        index=i,
        seq=i,
        request_id=str(i),
        segment="default",
        ok=True,
        error=None,
        http_status=200,
        scheduled_s=i,
        sent_s=i,
        send_lag_s=0.0,
        ttft_s=ttft,
        e2e_s=ttft + 0.1,
        stream_end_s=ttft + 0.1,
        chunk_times_s=[ttft, ttft + 0.1],
        chunk_tokens=[1, 1],
        token_source="server_usage",
        prompt_tokens=5,
        output_tokens=2,
        finish_reason="length",
    )


def test_summary_csv_rows_match_the_summary() -> None:
    summ = summarize([record(i, 0.01 * (i + 1)) for i in range(10)], [], interrupted=False)
    rows = list(csv.DictReader(io.StringIO(summary_csv(summ))))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    ttft = next(r for r in rows if r["metric"] == "ttft_ms")
    assert float(ttft["p50"]) == summ.ttft_ms.p50 and int(ttft["count"]) == 10
    assert next(r for r in rows if r["metric"] == "requests")["value"] == "10"
