"""vLLM's Prometheus metric names across versions, mapped to specguard's canonical names.

Counters are listed by their exposed sample name (``..._total``). Where a
metric was renamed, the newer name comes first and wins when both are exposed
(vllm-facts.md section 3.6: kv_cache_usage_perc was gpu_cache_usage_perc
before 0.9.2; V0 exposed spec-decode counters and an acceptance gauge).

``EXPOSED_IN`` says which releases expose each name by default (section 3.6), for what must name one metric
per release ahead of time: the Prometheus rules ``specguard canary observability`` writes. A name not in it
is exposed by every release this table covers (V1 from 0.8.3 for the spec-decode counters).
"""

from __future__ import annotations

GAUGES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "requests_running": ("vllm:num_requests_running",),
    "requests_waiting": ("vllm:num_requests_waiting",),
    "requests_swapped": ("vllm:num_requests_swapped",),
    "spec_acceptance_rate_v0": ("vllm:spec_decode_draft_acceptance_rate",),
    "spec_efficiency_v0": ("vllm:spec_decode_efficiency",),
}

COUNTERS: dict[str, tuple[str, ...]] = {
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
    "spec_emitted_tokens_v0": ("vllm:spec_decode_num_emitted_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
}

ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
REQUEST_SUCCESS = "vllm:request_success_total"
CACHE_CONFIG_INFO = "vllm:cache_config_info"

SPEC_DECODE_COUNTERS = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")

# Histograms by their base name (the series are ``_bucket``, ``_sum`` and ``_count``); newer name first.
# vLLM observes ITL once per engine step per request: with speculation one step emits up to k+1 tokens.
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "ttft": ("vllm:time_to_first_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "tpot": ("vllm:request_time_per_output_token_seconds",),
}

# The process collector's gauge (prometheus_client); a change means the server restarted.
PROCESS_START = "process_start_time_seconds"

Release = tuple[int, int, int]
# name -> (first release exposing it, first release no longer exposing it by default); None: open-ended.
# A hidden name (--show-hidden-metrics-for-version) counts as gone: rules must not depend on a flag.
EXPOSED_IN: dict[str, tuple[Release | None, Release | None]] = {
    "vllm:kv_cache_usage_perc": ((0, 9, 2), None),
    "vllm:gpu_cache_usage_perc": (None, (0, 11, 0)),
    "vllm:inter_token_latency_seconds": ((0, 10, 2), None),
    "vllm:time_per_output_token_seconds": (None, (0, 12, 0)),
    "vllm:request_time_per_output_token_seconds": ((0, 11, 0), None),
    "vllm:spec_decode_num_drafts_total": ((0, 8, 5), None),
    ACCEPTED_PER_POSITION: ((0, 8, 5), None),
    # V0 engine only (the default before 0.8.0, opt-in until the V0 package went in 0.10.0).
    "vllm:spec_decode_draft_acceptance_rate": (None, (0, 10, 0)),
    "vllm:spec_decode_efficiency": (None, (0, 10, 0)),
    "vllm:spec_decode_num_emitted_tokens_total": (None, (0, 10, 0)),
    "vllm:num_requests_swapped": (None, (0, 10, 0)),
}


def exposed_in(name: str, release: Release) -> bool:
    """Whether ``release`` exposes ``name`` by default."""
    first, gone = EXPOSED_IN.get(name, (None, None))
    return (first is None or first <= release) and (gone is None or release < gone)


def name_for(candidates: tuple[str, ...], release: Release) -> str | None:
    """The newest of a table entry's names that ``release`` exposes by default; None if it exposes none."""
    return next((n for n in candidates if exposed_in(n, release)), None)


def releases_text(name: str) -> str:
    """The releases exposing ``name`` by default, in words: ``0.10.2 and later``, ``up to 0.11.x``..."""
    first, gone = EXPOSED_IN.get(name, (None, None))

    def text(v: Release) -> str:
        return ".".join(map(str, v))

    if first and gone:
        return f"{text(first)} to before {text(gone)}"
    if first:
        return f"{text(first)} and later"
    if gone:
        return f"before {text(gone)}"
    return "every release"
