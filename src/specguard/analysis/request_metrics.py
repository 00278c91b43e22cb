"""Per-request latency metrics (their definitions, written into every summary, live in ``analysis.definitions``).

With speculative decoding one streamed chunk can carry several tokens, so a
gap between chunks is not an inter-token latency. Per-token ITL spreads each
chunk gap evenly over the tokens that chunk delivered; the per-chunk gap is
kept under its own name (inter-chunk latency).
"""

from __future__ import annotations

from collections.abc import Sequence

from specguard.results.models import RequestRecord

__all__ = ["inter_chunk_gaps", "measured_window", "per_token_itl", "tpot"]


def per_token_itl(chunk_times_s: Sequence[float], chunk_tokens: Sequence[int]) -> list[float]:
    """Inter-token latencies in seconds, one per token after the first chunk.

    A gap of g seconds before a chunk of n tokens contributes n values of g / n,
    so the values of one request sum exactly to last chunk time - first chunk time.
    """
    if len(chunk_times_s) != len(chunk_tokens):
        raise ValueError("chunk_times_s and chunk_tokens differ in length")
    itl: list[float] = []
    for i in range(1, len(chunk_times_s)):
        n = chunk_tokens[i]
        if n <= 0:
            continue
        gap = chunk_times_s[i] - chunk_times_s[i - 1]
        itl.extend([gap / n] * n)
    return itl


def inter_chunk_gaps(chunk_times_s: Sequence[float]) -> list[float]:
    return [b - a for a, b in zip(chunk_times_s, chunk_times_s[1:])]


def tpot(ttft_s: float | None, e2e_s: float | None, output_tokens: int | None) -> float | None:
    """(E2E - TTFT) / (output tokens - 1); None when undefined (fewer than two tokens)."""
    if ttft_s is None or e2e_s is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


def measured_window(records: Sequence[RequestRecord]) -> float:
    """Seconds from the first send to the last response end (ok or not): the window every per-second rate divides by."""
    if not records:
        return 0.0
    start = min(r.sent_s for r in records)
    end = max(r.sent_s + (r.stream_end_s or r.e2e_s or 0.0) for r in records)
    return max(end - start, 1e-9)
