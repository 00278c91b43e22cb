"""Per-request latency metrics, and the definitions written into every summary.

With speculative decoding one streamed chunk can carry several tokens, so a
gap between chunks is not an inter-token latency. Per-token ITL spreads each
chunk gap evenly over the tokens that chunk delivered; the per-chunk gap is
kept under its own name (inter-chunk latency).
"""

from __future__ import annotations

from collections.abc import Sequence

DEFINITIONS: dict[str, str] = {
    "ttft_ms": "Time to first token: from the request's send to the arrival of the first chunk carrying output tokens.",
    "e2e_ms": "End-to-end latency: from send to the arrival of the last chunk carrying output tokens "
    "(the end of the stream itself is recorded separately as stream_end_s).",
    "tpot_ms": "Time per output token, one value per request: (E2E - TTFT) / (output tokens - 1), "
    "output tokens as counted by the server (usage). Requests with fewer than 2 tokens have none.",
    "itl_ms": "Per-token inter-token latency: each gap between consecutive token-bearing chunks divided evenly "
    "over the tokens of the later chunk, one value per token after the first chunk, pooled over requests. "
    "Per request these values sum to E2E - TTFT.",
    "inter_chunk_ms": "Inter-chunk latency: the raw gap between consecutive token-bearing chunks. "
    "Not an inter-token latency when a chunk carries several tokens (speculation).",
    "tokens_per_chunk": "Output tokens per token-bearing chunk, from the server's running usage counts.",
    "output_tokens_per_s": "Sum of output tokens of successful requests divided by the measured window "
    "(first send to last response end).",
    "request_rate": "Requests finished (ok or not) divided by the measured window.",
    "error_rate": "Failed requests / all measured requests. Warm-up requests are excluded.",
    "send_lag_ms": "Actual send time minus scheduled send time: how late the client released each request.",
    "event_loop_lag_ms": "How late the client's event loop woke up a periodic 10 ms timer: a busy client shows here.",
    "acceptance.rate": "Delta of vllm:spec_decode_num_accepted_tokens over delta of num_draft_tokens in the run window.",
    "acceptance.mean_length": "1 + accepted tokens / drafts (vLLM's definition, bonus token included).",
    "acceptance.per_position": "accepted_tokens_per_pos[i] / drafts: the share of drafts whose first i+1 tokens were accepted.",
}


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
