"""vLLM 0.32.0's default bucket bounds for its latency histograms, for fakes and synthetic tests.

Copied from the vLLM source in specguard's CPU runtime, ``vllm/v1/metrics/buckets.py``
(``TIME_TO_FIRST_TOKEN_BUCKETS``, ``INTER_TOKEN_LATENCY_BUCKETS``, ``REQUEST_LATENCY_BUCKETS``), which
``vllm/v1/metrics/loggers.py`` passes to ``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds`` and ``vllm:request_time_per_output_token_seconds``, and
``vllm:e2e_request_latency_seconds``. Real servers are read, never these: they are for the scripted server
and for tests that bin known draws as a real server would.
"""

from __future__ import annotations

__all__ = ["E2E_BUCKETS", "ITL_BUCKETS", "TTFT_BUCKETS"]

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)

# name: (buckets, lognormal median in seconds, sigma): ITL of a busy decode, TTFT and E2E of short chats.
