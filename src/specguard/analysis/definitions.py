"""Every definition a report quotes, in one place: the metrics, the ratio, the intervals, the sample-size advice.

Summaries, compare.json, verdict.json, report.md, report.html and the
terminal tables all quote these strings from here; none words them itself.
"""

from __future__ import annotations

from specguard.analysis.defaults import DEFAULT_TARGET_CHANGE, MIN_TAIL_SAMPLES

METRIC_DEFINITIONS: dict[str, str] = {
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
    "slo": "Service-level objectives in ms, any subset of ttft_ms, itl_ms, tpot_ms, e2e_ms. A request meets them when "
    "it succeeded and each of its values is at or under its bound; for itl_ms the value is the request's own p95 of "
    "its per-token ITL (not its maximum, which one late chunk sets). A value the request does not have (ITL after a "
    "single token-bearing chunk, TPOT under 2 tokens) cannot miss. Failed requests never meet them.",
    "slo.goodput": "Requests that met every SLO divided by the measured window (the window of request_rate), requests/s.",
    "slo.attainment": "Requests that met every SLO / all measured requests, failed ones included.",
    "error_rate": "Failed requests / all measured requests. Warm-up requests are excluded.",
    "send_lag_ms": "Actual send time minus scheduled send time: how late the client released each request.",
    "event_loop_lag_ms": "How late the client's event loop woke up a periodic 10 ms timer: a busy client shows here.",
    "client_stalls": "Moments the client's event loop woke at least 20 ms late (the timer of event_loop_lag_ms): "
    "chunks that arrived meanwhile are read together and stamped at the stall's end, so a request streaming during "
    "one shows the client's delay in its TTFT and near-zero ITL between those chunks, not the server's.",
    "acceptance.rate": "Delta of vllm:spec_decode_num_accepted_tokens over delta of num_draft_tokens in the run window.",
    "acceptance.mean_length": "1 + accepted tokens / drafts (vLLM's definition, bonus token included).",
    "acceptance.per_position": "accepted_tokens_per_pos[i] / drafts: the share of drafts whose first i+1 tokens were accepted.",
    "gpu.utilization_pct": "Per GPU of the server's host, sampled on each scrape tick: the share of the last sample period "
    "in which a kernel ran (NVML's utilization.gpu, DCGM_FI_DEV_GPU_UTIL); mean, p95 and max over the run's samples.",
    "gpu.memory_used_mib": "Per GPU, framebuffer memory in use (NVML memory used, DCGM_FI_DEV_FB_USED), MiB; mean, p95 and "
    "max over the run. vLLM reserves its KV cache at start, so this shows the reservation, not the load.",
    "gpu.power_w": "Per GPU, board power draw (NVML power usage, DCGM_FI_DEV_POWER_USAGE), W; mean, p95 and max over the run.",
    "gpu.sm_clock_mhz": "Per GPU, SM clock (NVML SM clock, DCGM_FI_DEV_SM_CLOCK), MHz; mean, p95 and max over the run: "
    "a falling clock under load is a power or thermal limit.",
}


# Objective metrics that improve by rising; the latencies improve by falling.
HIGHER_IS_BETTER: frozenset[str] = frozenset({"output_tokens_per_s", "goodput"})

GOODPUT_INTERVAL = (
    "goodput ratio: 95 % percentile-bootstrap interval, the SLO-met indicator resampled over requests within "
    "repetitions with each run's window fixed (a segment's requests over their run's whole window); widened to a "
    "t-interval over per-repetition ratios when repetitions disagree beyond request-level noise (Cochran's Q)"
)


def more_requests_definition(target_change: float = DEFAULT_TARGET_CHANGE) -> str:
    return (
        f"more requests per arm: to reach {MIN_TAIL_SAMPLES} observations beyond the percentile, or, past that, "
        f"to narrow the interval to +-{target_change * 100:g} % at the observed spread"
    )


RATIO = "candidate / baseline of the percentile; below 1 means the candidate is faster"
RATIO_INTERVAL = (
    "95 % percentile-bootstrap interval of the ratio, requests resampled within repetitions; with three or more "
    "repetitions per arm, widened to a t-interval over the per-repetition ratios when they disagree beyond "
    "request-level noise (Cochran's Q, p < 0.05); with two, never widened: a t-interval on one degree of freedom "
    "is useless, so run three repetitions when between-repetition drift matters"
)

# compare.json's definitions, in this order.
COMPARISON_DEFINITIONS: dict[str, str] = {
    "ratio": RATIO,
    "ci_low/ci_high": RATIO_INTERVAL,
    "baseline_ci/candidate_ci": "95 % percentile-bootstrap interval of each arm's own percentile",
    "mann_whitney_p": "two-sided Mann-Whitney U test on one value per request (the mean for per-token ITL)",
    "prob_candidate_lower": "probability that a random candidate request is lower than a random baseline one",
    "more_requests_needed": more_requests_definition(),
    "goodput": GOODPUT_INTERVAL,
}

# A check's report adds these to the metric definitions.
CHECK_RATIO = "candidate / baseline; below 1 is faster for latencies (above 1 is better for tokens/s and goodput)"
CHECK_INTERVAL = (
    "percentile bootstrap, requests resampled within repetitions (per-token ITL by request); widened for "
    "disagreeing repetitions only with three or more of them"
)
GUARDRAIL_TEST = (
    "a guardrail holds when its 95 % interval lies within its budget (ratio upper end <= 1 + budget; for errors, "
    "Newcombe's score interval of candidate rate - baseline rate <= budget); it is beyond the budget (NO-GO) when "
    "its one-sided test against the budget rejects with Holm's correction over every guardrail test of the plan "
    "(family-wise alpha 5 %); otherwise it straddles the budget (INCONCLUSIVE)"
)
GREEDY_DIVERGENCE = (
    "at temperature 0, per cell and segment: the share of requests whose output differs from the baseline's first "
    "output of the same prompt item (the baseline's other requests measure its own variation), and the first "
    "differing token (or character, where the server returned no token ids); a warning when the candidate's share "
    "exceeds the baseline's with the 95 % Newcombe interval of the difference above zero, a guardrail "
    "(equivalence.guardrail) against max_extra_divergence"
)


def check_definitions() -> dict[str, str]:
    """verdict.json's, report.md's and report.html's definitions."""
    return {
        **METRIC_DEFINITIONS,
        "ratio": CHECK_RATIO,
        "95% CI": CHECK_INTERVAL,
        "guardrail": GUARDRAIL_TEST,
        "greedy-output divergence": GREEDY_DIVERGENCE,
    }


# The terminal's one-line reminders.
SUMMARY_FOOTNOTE = "Definitions: ITL is per token (a chunk's gap spread over its tokens); see summary.json 'definitions'."
RATIO_FOOTNOTE = "ratio < 1: the candidate is faster. "
