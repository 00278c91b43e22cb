"""Which requests and chunks a client stall touched, and the ITL left when those are taken out."""

from __future__ import annotations

import pytest

from specguard.analysis.client_stalls import client_stalls, itl_outside_stalls, open_during_stall, stalled_chunks
from specguard.analysis.request_metrics import per_token_itl
from specguard.results.models import RequestRecord


def record(sent_s: float, chunk_times_s: list[float]) -> RequestRecord:
    n = len(chunk_times_s)
    return RequestRecord(
        index=0,
        seq=0,
        request_id="r",
        segment="s",
        error=None,
        http_status=200,
        prompt_tokens=4,
        finish_reason="length",
        scheduled_s=sent_s,
        sent_s=sent_s,
        send_lag_s=0.0,
        ok=True,
        ttft_s=chunk_times_s[0],
        e2e_s=chunk_times_s[-1],
        stream_end_s=chunk_times_s[-1],
        output_tokens=n,
        chunk_times_s=chunk_times_s,
        chunk_tokens=[1] * n,
        token_source="server_usage",
    )


# Chunks every 5 ms from 10 ms; the client stalled from 1.022 to 1.050 s (run clock), then read the queued ones at once.
TIMES = [0.010, 0.015, 0.020, 0.0501, 0.0502, 0.0503, 0.055, 0.060, 0.065]
STALL = [(1.022, 1.050)]


def test_a_stall_touches_the_requests_open_during_it_and_only_those() -> None:
    during = record(1.0, TIMES)
    before, after = record(0.5, [0.01, 0.02]), record(1.06, [0.01, 0.02])
    assert open_during_stall(during, STALL) and not open_during_stall(before, STALL) and not open_during_stall(after, STALL)
    s = client_stalls([before, during, after], STALL)
    assert (s.count, s.requests_affected, s.intervals_s) == (1, 1, STALL)
    assert s.longest_ms == pytest.approx(28.0)
    assert client_stalls([during], []).longest_ms is None


def test_the_chunks_read_as_the_client_resumed_are_left_out_of_itl() -> None:
    r = record(1.0, TIMES)
    flags = stalled_chunks(r, STALL)
    assert flags == [False, False, False, True, True, True, False, False, False]
    kept = itl_outside_stalls(r.chunk_times_s, r.chunk_tokens, flags)
    # Gaps 1-2, 2-3 (before), 7-8, 8-9 (after); the stall's 30 ms gap, the near-zero ones and 6-7 (from a late stamp) go.
    assert kept == pytest.approx([0.005, 0.005, 0.005, 0.005])
    assert min(per_token_itl(r.chunk_times_s, r.chunk_tokens)) < 0.001, "all chunks: the burst reads as ITL ~0"
    assert itl_outside_stalls(r.chunk_times_s, r.chunk_tokens, [False] * len(TIMES)) == per_token_itl(
        r.chunk_times_s, r.chunk_tokens
    )
    with pytest.raises(ValueError):
        itl_outside_stalls(r.chunk_times_s, r.chunk_tokens, flags[:-1])
