"""``specguard sim run``'s report: per request rate, per arm, the latencies and throughput the engine model predicts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from specguard.analysis.definitions import METRIC_DEFINITIONS

SIM_SCHEMA: Literal["specguard.sim/1"] = "specguard.sim/1"
SIMULATED_BANNER = "SIMULATED: predicted by specguard's engine model, not measured on a server"


class Percentiles(BaseModel):
    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None


class ArmMetrics(BaseModel):
    """One arm at one rate, over the requests that arrived after the warm-up."""

    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    throughput_tokens_per_s: float = Field(description="output tokens emitted in the measured window / its length")
    request_rate: float = Field(description="measured requests finished / the measured window")
    requests: int
    unfinished: int = Field(description="measured requests still unfinished when the simulation stopped")
    saturated: bool = Field(description="the engine fell behind: finished requests below 95 % of those that arrived")
    steps: int
    mean_step_ms: float
    mean_batch: float = Field(description="requests per step, averaged over steps")
    preemptions: int
    kv_usage_max: float
    mean_accepted_length: float | None = Field(description="1 + accepted / drafts, as vLLM reports it")


class RatePoint(BaseModel):
    rate: float
    baseline: ArmMetrics
    speculative: ArmMetrics | None = None
    speedup: dict[str, float] = Field(
        default_factory=dict, description="baseline / speculative of each metric's p50 (throughput: speculative / baseline)"
    )


class KBand(BaseModel):
    start: int
    end: int
    k: int
    tokens_per_s_gain: float = Field(
        description="predicted per-request decode speed at this k / without speculation, the band's lowest"
    )


class SimSetup(BaseModel):
    target: str
    gpu: str
    tensor_parallel_size: int
    method: str | None
    draft: str | None
    num_speculative_tokens: int | None
    acceptance: list[float] | None
    acceptance_source: str | None
    workload: str
    arrivals: str
    duration_s: float
    warmup_s: float
    max_num_seqs: int
    max_num_batched_tokens: int
    scheduler_defaults: str | None = Field(
        default=None, description="which of the two limits are vLLM's per-GPU defaults (not given); null: both given"
    )
    num_kv_blocks_baseline: int
    num_kv_blocks_speculative: int | None
    block_size: int
    step_model: str
    engine: str = Field(default="v1", description="the vLLM engine generation modelled (v0: V0's scheduler and CPU costs)")
    seed: int


class SimReport(BaseModel):
    schema_version: Literal["specguard.sim/1"] = SIM_SCHEMA
    simulated: Literal[True] = True
    banner: str = SIMULATED_BANNER
    tool_version: str
    setup: SimSetup
    rates: list[RatePoint]
    crossover_rate: float | None = Field(
        description="the lowest simulated rate at which speculation stops paying on the crossover metric; null if none"
    )
    crossover_metric: str
    k_schedule: list[KBand] = Field(default_factory=list)
    k_schedule_config: dict[str, object] | None = None
    k_schedule_findings: list[str] = Field(default_factory=list, description="preflight's findings on k_schedule_config")
    k_schedule_vllm_version: str | None = Field(
        default=None, description="the vLLM release whose preflight rules checked k_schedule_config"
    )
    warnings: list[str] = Field(default_factory=list)
    definitions: dict[str, str] = Field(default_factory=dict)


SIM_DEFINITIONS: dict[str, str] = {
    **{k: METRIC_DEFINITIONS[k] for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")},
    "time origin": "simulated: each request's arrival at the engine (no network, no client, no API server)",
    "throughput_tokens_per_s": "output tokens emitted during the measured window (after the warm-up, up to the last "
    "arrival) divided by its length",
    "speedup": "baseline p50 / speculative p50 of the metric (above 1: speculation is faster); for throughput, "
    "speculative / baseline",
    "crossover_rate": "the lowest simulated rate at which the speculative arm's speed-up on the crossover metric falls "
    "to 1 or below, after a rate where it was above 1; null when it never does in the simulated range, or never paid",
    "percentiles": "from a log-binned histogram of 0.1 % bins: each percentile is within 0.1 % of the exact one",
    "k_schedule": "per batch size b, the k that maximises a request's predicted decode speed (1 + expected accepted "
    "tokens) / (target step at b requests with b x (1 + k) tokens + proposer cost); consecutive batch sizes with the "
    "same best k form one band",
}
