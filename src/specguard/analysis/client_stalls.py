"""When the measuring client itself stopped reading, and which requests that touched.

A stalled client (its process not scheduled, its event loop busy) cannot stamp chunks as they arrive: the
kernel queues them and the next read takes them all at once. On this project's 2-core CI machines the
measuring process was seen unscheduled for 150-250 ms at a time while a vLLM CPU server generated (the VM's
vCPUs had 13 % steal), and the 32 chunks of a request then carried one timestamp: per-token ITL 0.00 ms
against 5 ms measured a minute earlier. Such requests are not thrown away (they happened); the summary
counts them and warns, so nobody reads the client's stall as the server's speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from specguard.analysis.request_metrics import per_token_itl
from specguard.results.models import ClientStalls, RequestRecord

__all__ = [
    "MAX_LISTED_STALLS",
    "STALL_THRESHOLD_S",
    "client_stalls",
    "itl_outside_stalls",
    "open_during_stall",
    "stalled_chunks",
]

# 4 tokens of the embedded CPU server (about 5 ms each), and 100x the loop lag of an idle client (p50 0.1 ms).
STALL_THRESHOLD_S: Final = 0.020
MAX_LISTED_STALLS: Final = 200
# The chunks queued during a stall are stamped as the loop resumes, just before or after the timer that
# measures the stall wakes: a little past the stall's recorded end.
_READ_AFTER_STALL_S: Final = 0.002


def open_during_stall(record: RequestRecord, stalls: Sequence[tuple[float, float]]) -> bool:
    """Whether the request's stream was open (send to stream end) while the client was stalled."""
    end = record.sent_s + (record.stream_end_s or record.e2e_s or 0.0)
    return any(start < end and stop > record.sent_s for start, stop in stalls)


def client_stalls(records: Sequence[RequestRecord], stalls: Sequence[tuple[float, float]]) -> ClientStalls:
    """The summary's account of the client's stalls (``(start, end)`` in run-clock seconds, as ``sent_s``)."""
    return ClientStalls(
        threshold_ms=STALL_THRESHOLD_S * 1000,
        count=len(stalls),
        longest_ms=max((b - a) * 1000 for a, b in stalls) if stalls else None,
        requests_affected=sum(open_during_stall(r, stalls) for r in records),
        intervals_s=[(a, b) for a, b in stalls[:MAX_LISTED_STALLS]],
    )


def _during(t: float, stalls: Sequence[tuple[float, float]]) -> bool:
    return any(start <= t <= stop + _READ_AFTER_STALL_S for start, stop in stalls)


def stalled_chunks(record: RequestRecord, stalls: Sequence[tuple[float, float]]) -> list[bool]:
    """For each chunk of the request, whether it was read during (or as the client came out of) a stall."""
    return [_during(record.sent_s + t, stalls) for t in record.chunk_times_s]


def itl_outside_stalls(chunk_times_s: Sequence[float], chunk_tokens: Sequence[int], stalled: Sequence[bool]) -> list[float]:
    """Per-token ITL values (``per_token_itl``) of the chunks whose gap no stall touched.

    A chunk read as the client came out of a stall carries the stall in its gap, the chunks read with it carry
    near-zero gaps, and the first chunk after them a gap measured from a late stamp: a gap counts when neither
    of its two chunks was read during a stall. ``stalled`` comes from ``stalled_chunks`` of the same stream
    (the proxy's record of a stream can take its client's).
    """
    if not len(chunk_times_s) == len(chunk_tokens) == len(stalled):
        raise ValueError("chunk times, chunk tokens and stalled flags differ in length")
    values: list[float] = []
    for i in range(1, len(chunk_times_s)):
        if not (stalled[i] or stalled[i - 1]):
            values.extend(per_token_itl(chunk_times_s[i - 1 : i + 1], chunk_tokens[i - 1 : i + 1]))
    return values
