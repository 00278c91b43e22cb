"""File formats of a run directory: one pydantic model per file, each with a schema version.

A run directory holds (``run_dir.RunDir`` names the files):
  run.json             RunInfo          what was run, against what, when
  requests.jsonl       RequestRecord    one line per measured request, flushed as each finishes
  server_metrics.jsonl MetricsSample    one line per /metrics scrape (or failed scrape)
  gpu_metrics.jsonl    GpuSample        one line per GPU sampling (NVML or a DCGM exporter's page), if sampled
  outputs.jsonl        OutputRecord     each request's output (token ids, or text), only while a check compares
                                        greedy outputs (deleted after its verdict) or with --keep-output
  summary.json         Summary          the derived figures
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, model_validator

from specguard.models_base import FiniteModel, StrictModel

RUN_SCHEMA: Final = "specguard.run/1"
REQUEST_SCHEMA: Final = "specguard.request/1"
METRICS_SCHEMA: Final = "specguard.server_metrics/1"
SUMMARY_SCHEMA: Final = "specguard.summary/1"
GPU_SCHEMA: Final = "specguard.gpu_metrics/1"
OUTPUT_SCHEMA: Final = "specguard.output/1"

TokenSource = Literal["server_usage", "local_tokenizer", "chunk_count"]


class LoadShape(FiniteModel):
    """How requests are released. Exactly one of rate / concurrency / burst drives the run."""

    kind: Literal["idle", "constant", "poisson", "gamma", "concurrency", "burst"]
    rate: float | None = Field(default=None, gt=0, description="requests per second (constant, poisson, gamma)")
    burstiness: float | None = Field(default=None, gt=0, description="gamma shape; 1.0 is Poisson, <1 burstier")
    concurrency: int | None = Field(default=None, ge=1, description="requests kept in flight (concurrency; idle is 1)")
    burst: int | None = Field(default=None, ge=1, description="requests released together at t=0")
    num_requests: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0)
    warmup_requests: int = Field(default=0, ge=0)
    seed: int = Field(default=0, ge=0)


class SamplingOverrides(FiniteModel):
    """Sampling parameters forced on every request; None keeps each prompt's own value."""

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    ignore_eos: bool | None = None


class Slo(FiniteModel):
    """Service-level objectives, milliseconds, any subset: a request meets them when it is at or under every one given.

    ``itl_ms`` applies to the request's own p95 of its per-token ITL (see ``analysis.slo``).
    """

    ttft_ms: float | None = Field(default=None, gt=0)
    itl_ms: float | None = Field(default=None, gt=0, description="bound on the request's p95 per-token ITL")
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _at_least_one(self) -> Slo:
        if all(v is None for v in (self.ttft_ms, self.itl_ms, self.tpot_ms, self.e2e_ms)):
            raise ValueError("give at least one of ttft_ms, itl_ms, tpot_ms, e2e_ms")
        return self

    def given(self) -> dict[str, float]:
        """The objectives set, in the order ttft_ms, itl_ms, tpot_ms, e2e_ms."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class RunInfo(StrictModel):
    schema_version: Literal["specguard.run/1"] = RUN_SCHEMA
    tool_version: str
    base_url: str
    api: Literal["completions", "chat"]
    model: str
    metrics_url: str | None
    gpu_source: str | None = Field(default=None, description="'nvml', a DCGM exporter's URL, or None: GPUs not sampled")
    prompt_source: str
    prompt_count: int
    load: LoadShape
    sampling: SamplingOverrides
    sent_sampling: dict[str, list[float | int | bool | None]] = Field(
        default_factory=dict,
        description="per key, the distinct values that went on the wire in the requests (null: not sent, server default)",
    )
    prompt_sha256: str | None = Field(default=None, description="SHA-256 of the prompt file's bytes")
    prompt_generator: dict[str, str | int] | None = Field(default=None, description="a synthetic set's generator parameters")
    server_version: str | None = None
    cache_config: dict[str, str] | None = None
    labels: dict[str, str] = Field(default_factory=dict, description="--label KEY=VALUE metadata, carried into reports")
    headers: dict[str, str] = Field(
        default_factory=dict, description="--header values sent; credential-like ones stored as <redacted>"
    )
    extra_body: dict[str, Any] | None = Field(default=None, description="--extra-body, merged into every request body")
    started_unix: float
    started_monotonic: float = Field(description="time.monotonic() at the run's time origin; send times are relative to it")
    finished_unix: float | None = None
    interrupted: bool = False
    interrupted_phase: Literal["warm-up", "measurement"] | None = None
    slo: Slo | None = Field(default=None, description="the SLOs the summary's goodput counts against")


class RequestRecord(StrictModel):
    """One measured request. Times are seconds; chunk times are relative to the actual send."""

    schema_version: Literal["specguard.request/1"] = REQUEST_SCHEMA
    index: int = Field(description="0-based line of the prompt file (or item of the synthetic set) used")
    seq: int = Field(description="0-based order in which the request was scheduled in this run")
    request_id: str
    segment: str
    ok: bool
    error: str | None
    http_status: int | None
    scheduled_s: float = Field(description="planned send time, seconds after the run's time origin")
    sent_s: float = Field(description="actual send time, seconds after the run's time origin")
    send_lag_s: float
    ttft_s: float | None = Field(description="send -> first chunk carrying output tokens")
    e2e_s: float | None = Field(description="send -> last chunk carrying output tokens")
    stream_end_s: float | None = Field(description="send -> end of the response stream")
    chunk_times_s: list[float]
    chunk_tokens: list[int]
    token_source: TokenSource | None = Field(description="None when no stream came back (no tokens to count)")
    prompt_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    temperature: float | None = None
    max_tokens: int | None = None
    item: int | None = Field(
        default=None,
        description="0-based position of the prompt item in its set (several items share a line with turns: all)",
    )
    output_token_ids: list[int] | None = Field(
        default=None, description="the output's token ids as the server returned them; only with --keep-output"
    )


class OutputRecord(StrictModel):
    """One request's output, for comparing greedy outputs between arms: token ids, or the text when none came back."""

    schema_version: Literal["specguard.output/1"] = OUTPUT_SCHEMA
    seq: int = Field(description="the request's seq in requests.jsonl")
    item: int = Field(description="0-based position of the prompt item in its set")
    token_ids: list[int] | None = Field(description="None: the server sent no token ids (not vLLM, or an older one)")
    text: str | None = Field(default=None, description="the output text, stored only when there are no token ids")


class MetricsSample(StrictModel):
    """One scrape of the server's /metrics, reduced to what specguard uses."""

    schema_version: Literal["specguard.server_metrics/1"] = METRICS_SCHEMA
    t_s: float = Field(description="seconds after the run's time origin")
    phase: Literal["before", "during", "after"]
    ok: bool
    error: str | None = None
    gauges: dict[str, float] = Field(default_factory=dict)
    counters: dict[str, float] = Field(default_factory=dict)
    accepted_per_position: list[float] = Field(default_factory=list)
    finished_by_reason: dict[str, float] = Field(default_factory=dict)
    names_seen: dict[str, str] = Field(default_factory=dict, description="canonical name -> exposed name")
    cache_config: dict[str, str] | None = Field(default=None, description="labels of vllm:cache_config_info")


GpuSource = Literal["nvml", "dcgm"]


class GpuReading(StrictModel):
    """One GPU at one moment; a figure the source did not give is None."""

    gpu: str = Field(description="the device index as the source numbers it (NVML index, DCGM's 'gpu' label)")
    uuid: str | None = None
    name: str | None = Field(default=None, description="the model name (NVML's device name, DCGM's 'modelName')")
    utilization_pct: float | None = Field(default=None, description="share of the last sample period a kernel ran, %")
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    sm_clock_mhz: float | None = None
    power_w: float | None = None


class GpuSample(StrictModel):
    """One sampling of the server host's GPUs; ``ok`` false with the reason when it failed or is not available."""

    schema_version: Literal["specguard.gpu_metrics/1"] = GPU_SCHEMA
    t_s: float = Field(description="seconds after the run's time origin")
    phase: Literal["before", "during", "after"]
    source: GpuSource | None = Field(description="None: no source could be used (the reason is in error)")
    ok: bool
    error: str | None = None
    gpus: list[GpuReading] = Field(default_factory=list)


class GpuStats(StrictModel):
    """One GPU over a run's samples: mean, p95 (numpy's linear rule) and max of each figure.

    The p95 and max fields beyond the first six came later: None in summaries written before them.
    """

    gpu: str
    uuid: str | None
    name: str | None
    samples: int
    utilization_mean_pct: float | None
    utilization_max_pct: float | None
    memory_used_max_mib: float | None
    memory_total_mib: float | None
    power_mean_w: float | None
    sm_clock_mean_mhz: float | None
    utilization_p95_pct: float | None = None
    memory_used_mean_mib: float | None = None
    memory_used_p95_mib: float | None = None
    power_p95_w: float | None = None
    power_max_w: float | None = None
    sm_clock_p95_mhz: float | None = None
    sm_clock_max_mhz: float | None = None


class GpuUsage(StrictModel):
    """The server host's GPUs during a run, or why they could not be read."""

    available: bool
    source: GpuSource | None
    reason: str | None = Field(default=None, description="why no GPU figures (available false), or the first failure")
    samples: int = Field(description="samplings that succeeded")
    gaps: int = Field(description="samplings that failed")
    gpus: list[GpuStats] = Field(default_factory=list)


class Percentiles(StrictModel):
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None = None


class Acceptance(StrictModel):
    rate: float | None = Field(description="accepted draft tokens / draft tokens")
    mean_length: float | None = Field(description="1 + accepted tokens / drafts (includes the bonus token)")
    per_position: list[float] = Field(description="accepted at position i / drafts")
    drafts: float
    draft_tokens: float
    accepted_tokens: float


class GaugeSeries(StrictModel):
    samples: int
    mean: float | None
    max: float | None


class ClientStalls(StrictModel):
    """The moments the measuring client could not read: what arrived then is stamped at the stall's end."""

    threshold_ms: float = Field(description="a wake-up of the 10 ms timer at least this late counts as a stall")
    count: int
    longest_ms: float | None
    requests_affected: int = Field(description="requests whose stream was open during a stall")
    intervals_s: list[tuple[float, float]] = Field(
        description="(start, end) of the first stalls, seconds after the run's time origin (as sent_s)"
    )


class SloAttainment(StrictModel):
    """Goodput: the requests that met every SLO given, per second of the run's measured window."""

    slo: Slo
    met: int = Field(description="measured requests that succeeded and met every SLO given")
    attainment: float = Field(description="met / all measured requests (failed ones included)")
    goodput: float = Field(description="met / the measured window (the window of request_rate), requests/s")
    missed_by: dict[str, int] = Field(
        default_factory=dict, description="successful requests over each SLO (one request can miss several)"
    )


class WarningNote(StrictModel):
    """A warning as data, made where the warning is made: its kind, its number and the limit it crossed, where.

    ``text`` is the sentence as shown in ``warnings``; reports group and rank by ``kind`` and ``value`` and never
    read a number back out of the sentence.
    """

    kind: str = Field(description="what the warning is about (report/build/warning_groups.py's KINDS)")
    text: str
    value: float | None = Field(default=None, description="its number, as the sentence shows it")
    limit: float | None = Field(default=None, description="the threshold it crossed, when it has one")
    where: str | None = Field(default=None, description="'traffic / sampling / arm' of a run, a cell's name, ...")


class Summary(StrictModel):
    schema_version: Literal["specguard.summary/1"] = SUMMARY_SCHEMA
    requests: int
    errors: int
    error_rate: float
    interrupted: bool
    incomplete: bool = Field(default=False, description="recomputed from requests.jsonl: the run never wrote its summary")
    error_kinds: dict[str, int] = Field(default_factory=dict, description="failed requests per distinct error message")
    duration_s: float
    request_rate: float
    output_tokens: int
    output_tokens_per_s: float
    slo: SloAttainment | None = Field(default=None, description="goodput and SLO attainment; None without SLOs")
    ttft_ms: Percentiles
    itl_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles
    inter_chunk_ms: Percentiles
    tokens_per_chunk: Percentiles
    send_lag_ms: Percentiles
    event_loop_lag_ms: Percentiles
    read_lag_ms: Percentiles | None = Field(
        default=None, description="from the kernel holding a probe's bytes to the client stamping them (loadgen/read_probe)"
    )
    client_stalls: ClientStalls | None = None
    acceptance: Acceptance | None
    kv_cache_usage: GaugeSeries | None
    requests_running: GaugeSeries | None
    requests_waiting: GaugeSeries | None
    preemptions: float | None
    gpu: GpuUsage | None = Field(default=None, description="None: not sampled (a run before GPU sampling, or turned off)")
    finished_by_reason: dict[str, float]
    server_generation_tokens: float | None
    token_sources: dict[str, int]
    segments: dict[str, int]
    scrape_gaps: int
    notes: list[str]
    warnings: list[str]
    warning_notes: list[WarningNote] = Field(default_factory=list, description="the warnings of known kinds, as data")
    definitions: dict[str, str]
