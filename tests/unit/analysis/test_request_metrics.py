import pytest

from specguard.analysis.request_metrics import inter_chunk_gaps, per_token_itl, tpot
from specguard.analysis.summarize import summarize
from specguard.loadgen.sse import ParsedStream, chunk_token_counts
from specguard.results.models import RequestRecord


def test_per_token_itl_spreads_each_gap_over_its_chunk():
    # chunks at 10, 20, 50 ms carrying 1, 2, 3 tokens
    itl = per_token_itl([0.010, 0.020, 0.050], [1, 2, 3])
    assert itl == pytest.approx([0.005, 0.005, 0.010, 0.010, 0.010])
    assert sum(itl) == pytest.approx(0.050 - 0.010)


def test_inter_chunk_gap_is_not_per_token():
    assert inter_chunk_gaps([0.010, 0.020, 0.050]) == pytest.approx([0.010, 0.030])


def test_tpot_definition():
    assert tpot(0.1, 1.1, 11) == pytest.approx(0.1)
    assert tpot(0.1, 0.1, 1) is None
    assert tpot(None, 1.0, 5) is None


def test_itl_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        per_token_itl([0.1, 0.2], [1])


def test_chunk_tokens_from_server_usage_drop_tokenless_chunks():
    parsed = ParsedStream(
        chunk_times=[0.01, 0.02, 0.03, 0.05], chunk_texts=["", "a", "bcd", ""], chunk_usage=[0, 1, 4, 4], completion_tokens=4
    )
    times, tokens, source, total = chunk_token_counts(parsed, None)
    assert (times, tokens, source, total) == ([0.02, 0.03], [1, 3], "server_usage", 4)


def test_chunk_tokens_fall_back_to_tokenizer_then_chunk_count():
    parsed = ParsedStream(chunk_times=[0.01, 0.02], chunk_texts=["ab", "cde"], chunk_usage=[None, None], completion_tokens=5)
    _, tokens, source, total = chunk_token_counts(parsed, lambda s: len(s))
    assert (tokens, source, total) == ([2, 3], "local_tokenizer", 5)
    _, tokens, source, total = chunk_token_counts(parsed, None)
    assert (tokens, source, total) == ([1, 1], "chunk_count", 5)


def _record(seq, times, tokens, ok=True):
    return RequestRecord(
        index=seq,
        seq=seq,
        request_id=f"r{seq}",
        segment="s",
        ok=ok,
        error=None if ok else "x",
        http_status=200,
        scheduled_s=seq,
        sent_s=seq,
        send_lag_s=0.0,
        ttft_s=times[0] if times else None,
        e2e_s=times[-1] if times else None,
        stream_end_s=times[-1] if times else 0.0,
        chunk_times_s=times,
        chunk_tokens=tokens,
        token_source="server_usage",
        prompt_tokens=4,
        output_tokens=sum(tokens),
        finish_reason="length",
    )


def test_summary_percentiles_and_rates():
    recs = [_record(0, [0.1, 0.2, 0.4], [1, 1, 2]), _record(1, [0.1, 0.3], [1, 1]), _record(2, [], [], ok=False)]
    s = summarize(recs, [])
    assert s.requests == 3 and s.errors == 1 and s.error_rate == pytest.approx(1 / 3)
    # TPOT: (0.4-0.1)/3 = 0.1 and (0.3-0.1)/1 = 0.2
    assert s.tpot_ms.count == 2 and s.tpot_ms.mean == pytest.approx(150.0)
    # ITL values: 100, 100, 100 (request 0) and 200 (request 1)
    assert s.itl_ms.count == 4 and s.itl_ms.mean == pytest.approx(125.0)
    assert s.inter_chunk_ms.count == 3
    assert s.tokens_per_chunk.max == 2
    assert s.output_tokens == 6
    assert s.duration_s == pytest.approx(2.0)  # first send at 0, the failed request (sent at 2 s) ends the window
    assert s.acceptance is None
    assert any("no /metrics scrape" in n for n in s.notes)
    assert set(s.definitions) >= {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "tokens_per_chunk"}
