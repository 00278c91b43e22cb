"""vLLM's Prometheus metric names across versions, mapped to specguard's canonical names.

Counters are listed by their exposed sample name (``..._total``). Where a
metric was renamed, the newer name comes first and wins when both are exposed
(vllm-facts.md section 3.6: kv_cache_usage_perc was gpu_cache_usage_perc
before 0.9.2; V0 exposed spec-decode counters and an acceptance gauge).
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
