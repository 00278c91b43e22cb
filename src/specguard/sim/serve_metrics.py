"""``sim serve``'s /metrics: the series a vLLM 0.32 V1 server exposes, under vLLM's names, on vLLM's bucket bounds.

Counted as vLLM counts them (``server_metrics/names.py`` lists what specguard reads): spec-decode counters per
step over the requests that had a draft, ``num_accepted_tokens_per_pos`` with a ``position`` label (0-based),
ITL once per engine step per request (a speculative step emits up to k + 1 tokens in one observation), TPOT as
(e2e - TTFT) / (output tokens - 1). Latencies are wall-clock, from a request's arrival at this server.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specguard.scripted.vllm_buckets import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS
from specguard.sim.engine import SimEngine, StepOutcome


class SimMetrics:
    def __init__(self, served_name: str, engine: SimEngine) -> None:
        self.engine = engine
        self.registry = r = CollectorRegistry()
        labels = ["engine", "model_name"]
        lv = ("0", served_name)

        def gauge(name: str) -> Gauge:
            return Gauge(name, name, labels, registry=r)

        def counter(name: str) -> Counter:
            return Counter(name, name, labels, registry=r)

        def histogram(name: str, bounds: tuple[float, ...]) -> Histogram:
            return Histogram(name, name, labels, buckets=bounds, registry=r)

        self.kv = gauge("vllm:kv_cache_usage_perc").labels(*lv)
        self.running = gauge("vllm:num_requests_running").labels(*lv)
        self.waiting = gauge("vllm:num_requests_waiting").labels(*lv)
        self.preemptions = counter("vllm:num_preemptions").labels(*lv)
        self.prompt_tokens = counter("vllm:prompt_tokens").labels(*lv)
        self.generation_tokens = counter("vllm:generation_tokens").labels(*lv)
        success = Counter("vllm:request_success", "vllm:request_success", [*labels, "finished_reason"], registry=r)
        success.labels(*lv, "stop")  # vLLM creates a series per finish reason up front; this engine never stops early
        self.success = success.labels(*lv, "length")
        self.aborted = success.labels(*lv, "abort")  # a client that went away (see EngineLoop.abandon)
        self.ttft = histogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS).labels(*lv)
        self.itl = histogram("vllm:inter_token_latency_seconds", ITL_BUCKETS).labels(*lv)
        self.tpot = histogram("vllm:request_time_per_output_token_seconds", ITL_BUCKETS).labels(*lv)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", E2E_BUCKETS).labels(*lv)
        cfg = engine.cfg
        info = Gauge("vllm:cache_config_info", "vllm:cache_config_info", ["block_size", "num_gpu_blocks"], registry=r)
        info.labels(str(cfg.block_size), str(cfg.num_kv_blocks)).set(1)
        self.spec = cfg.speculation is not None
        if self.spec:
            self.drafts = counter("vllm:spec_decode_num_drafts").labels(*lv)
            self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens").labels(*lv)
            self.accepted = counter("vllm:spec_decode_num_accepted_tokens").labels(*lv)
            per_pos = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                [*labels, "position"],
                registry=r,
            )
            self.per_pos = [per_pos.labels(*lv, str(i)) for i in range(engine.max_k)]
        self._preempted = 0

    def step(self, out: StepOutcome) -> None:
        """The engine-side counters of one step (the latencies are observed per request, as tokens are delivered)."""
        self.generation_tokens.inc(int(out.emit_tokens.sum()) + len(out.first_ids))
        if out.preempted:
            self.preemptions.inc(out.preempted)
        if self.spec and out.drafts:
            self.drafts.inc(out.drafts)
            self.draft_tokens.inc(out.draft_tokens)
            self.accepted.inc(out.accepted_tokens)
            if out.accepted_per_pos is not None:
                for c, n in zip(self.per_pos, out.accepted_per_pos.tolist(), strict=False):
                    if n:
                        c.inc(n)

    def text(self) -> bytes:
        e = self.engine
        self.kv.set(e.kv_usage)
        self.running.set(e.running)
        self.waiting.set(len(e.waiting))
        return generate_latest(self.registry)
