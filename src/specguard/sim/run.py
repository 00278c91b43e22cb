"""``specguard sim run``: the baseline and one speculative setting over a range of request rates, and what follows.

Builds both engines from the catalogs (or a calibrated profile), sizes their
KV pools with Gate 3's formulas (``sizing.memory_plan``: a draft's layers take
blocks from the target's pool, and draft methods reserve lookahead slots),
simulates every rate, finds the crossover and the best k per batch-size band,
and checks that band schedule with the preflight rules of the target release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specguard import __version__
from specguard.errors import OptionError
from specguard.preflight.rules import schedule_findings
from specguard.sim.acceptance import AcceptanceRates
from specguard.sim.engine import EngineConfig, KSchedule, Speculation
from specguard.sim.k_schedule import best_k_bands
from specguard.sim.results import SIM_DEFINITIONS, ArmMetrics, RatePoint, SimReport, SimSetup
from specguard.sim.simulate import simulate_arm
from specguard.sim.step_time import (
    DRAFT_PASS_OVERHEAD_S,
    V0_COSTS,
    LinearProfile,
    ModelCost,
    ProposerCost,
    ProposerKind,
    Roofline,
    RooflineCoefficients,
    StepTime,
    draft_profile,
    head_cost,
)
from specguard.sim.workload import Arrivals, Lengths, arrival_times, draw_lengths
from specguard.sizing.catalog import GpuEntry, ModelEntry, check_tensor_parallel, resolve_gpu, resolve_model
from specguard.sizing.memory_plan import DraftLayers, MemoryInputs, model_weight_bytes, plan_memory
from specguard.vllm import knowledge as K

SimMethod = Literal["ngram", "suffix", "draft_model", "eagle", "eagle3", "mtp"]
# When no acceptance is given: a geometric prior a_i = 0.7^i, stated as assumed in the report's warnings.
ASSUMED_CONDITIONAL_ACCEPTANCE = 0.7
CROSSOVER_METRICS = ("e2e_ms", "tpot_ms", "itl_ms", "ttft_ms", "throughput_tokens_per_s")


class SimRequest(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    target: str
    gpu: str
    tensor_parallel_size: int = Field(default=1, ge=1)
    rates: list[float] = Field(min_length=1)
    prompt_len: int = Field(default=512, ge=1)
    output_len: int = Field(default=256, ge=1)
    lengths: Lengths | None = Field(default=None, description="observed (prompt, output) pairs instead of fixed lengths")
    method: SimMethod | None = None
    draft: str | None = None
    num_speculative_tokens: int | None = Field(default=None, ge=1, le=32)
    acceptance: list[float] | None = None
    acceptance_source: str | None = None
    arrivals: Arrivals = Arrivals()
    duration_s: float = Field(default=300.0, gt=0)
    warmup_s: float | None = Field(default=None, ge=0, description="default: a tenth of the duration")
    max_num_seqs: int | None = Field(default=None, ge=1, description="None: vLLM's default for the GPU")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, description="None: vLLM's default for the GPU")
    block_size: int = Field(default=16, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    profile: LinearProfile | None = None
    profile_source: str | None = None
    crossover_metric: str = "e2e_ms"
    vllm_version: str | None = None
    seed: int = Field(default=0, ge=0)
    engine: Literal["v1", "v0"] = Field(
        default="v1", description="v0: vLLM before 0.8, for comparing with V0-era measurements (EngineConfig, V0_COSTS)"
    )

    @field_validator("rates")
    @classmethod
    def _positive_rates(cls, rates: list[float]) -> list[float]:
        if any(r <= 0 for r in rates):
            raise ValueError("every --rate must be above 0")
        return sorted(set(rates))

    @field_validator("acceptance")
    @classmethod
    def _acceptance_rules(cls, rates: list[float] | None) -> list[float] | None:
        """AcceptanceRates' rules (in [0, 1], non-increasing), reported against this field, before any step."""
        if rates is not None:
            try:
                AcceptanceRates(per_position=rates)
            except ValidationError as exc:
                raise ValueError("; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())) from None
        return rates

    @field_validator("crossover_metric")
    @classmethod
    def _metric(cls, m: str) -> str:
        if m not in CROSSOVER_METRICS:
            raise ValueError(f"one of {', '.join(CROSSOVER_METRICS)}")
        return m

    @model_validator(mode="after")
    def _method_needs(self) -> SimRequest:
        if self.method is None and (self.draft or self.acceptance or self.num_speculative_tokens):
            raise ValueError("--draft, --acceptance and --num-speculative-tokens need --method")
        if self.method == "draft_model" and not self.draft:
            raise ValueError("--method draft_model needs --draft NAME (a catalog model or a local directory)")
        if self.method in ("eagle", "eagle3") and not self.draft:
            raise ValueError(
                f"--method {self.method} needs --draft NAME: the EAGLE head vLLM loads (its cost is estimated as one "
                "decoder layer of the target and its LM head; the name goes into the emitted config)"
            )
        if self.method is not None and self.num_speculative_tokens is None:
            self.num_speculative_tokens = len(self.acceptance) if self.acceptance else 4
        if self.engine == "v0" and self.profile is not None:
            raise ValueError(
                "--engine v0 adds V0's published CPU costs to the roofline; a calibrated --profile already has yours"
            )
        return self


def _step_model(req: SimRequest, target: ModelEntry, gpu: GpuEntry) -> tuple[StepTime, str]:
    if req.profile is not None:
        return req.profile, f"calibrated linear profile ({req.profile_source or 'given'})"
    if not (gpu.hbm_bytes_per_s and gpu.bf16_flops):
        raise OptionError(f"--gpu {gpu.name}: no bandwidth or FLOP/s known; calibrate a profile with 'specguard sim calibrate'")
    if req.engine == "v0":
        v0 = RooflineCoefficients(per_seq_overhead_s=V0_COSTS.per_seq_s)
        return Roofline(ModelCost.of(target, req.tensor_parallel_size), gpu, v0), "roofline with vLLM V0's CPU costs"
    return Roofline(ModelCost.of(target, req.tensor_parallel_size), gpu), "roofline from the model and GPU catalogs"


def _proposer(req: SimRequest, target: ModelEntry, draft: ModelEntry | None, gpu: GpuEntry, step: StepTime) -> ProposerCost:
    method = req.method or "ngram"
    tp = req.tensor_parallel_size
    kind: ProposerKind = "eagle" if method in ("eagle", "eagle3") else method  # type: ignore[assignment]
    if method in ("ngram", "suffix"):
        return ProposerCost(kind)
    if isinstance(step, LinearProfile):
        cost = ModelCost.of(draft, tp) if draft else head_cost(target, tp)
        return ProposerCost(kind, draft_profile(step, ModelCost.of(target, tp), cost))
    cost = ModelCost.of(draft, tp) if draft else head_cost(target, tp)
    per_pass = V0_COSTS.draft_pass_s if req.engine == "v0" else DRAFT_PASS_OVERHEAD_S
    return ProposerCost(kind, Roofline(cost, gpu, RooflineCoefficients(fixed_overhead_s=per_pass)))


def _kv_blocks(req: SimRequest, target: ModelEntry, draft: ModelEntry | None, gpu: GpuEntry) -> tuple[int, int | None]:
    tp = req.tensor_parallel_size
    max_len = req.max_model_len or target.max_position_embeddings
    inputs = MemoryInputs(
        target_shape=target.shape,
        target_weight_bytes=model_weight_bytes(target, target.native_dtype),
        tensor_parallel_size=tp,
        gpu_memory_bytes=gpu.memory_bytes,
        gpu_memory_utilization=req.gpu_memory_utilization,
        block_size=req.block_size,
        max_model_len=max_len,
    )
    layers = None
    if req.method in ("draft_model", "eagle", "eagle3", "mtp"):
        k = req.num_speculative_tokens or 1
        if draft is not None:
            layers = DraftLayers(
                shape=draft.shape,
                tensor_parallel_size=tp,
                weight_bytes=model_weight_bytes(draft, draft.native_dtype),
                lookahead_slots=K.lookahead_slots(req.method, k),
            )
        else:
            shape = target.shape.model_copy(update={"num_layers": 1})
            layers = DraftLayers(
                shape=shape,
                tensor_parallel_size=tp,
                weight_bytes=target.decoder_layer_params * 2,
                lookahead_slots=K.lookahead_slots(req.method, k),
            )
    plan = plan_memory(inputs, layers)
    if plan.baseline.kv_blocks <= 0:
        raise OptionError(
            f"--target {target.name} does not fit on {req.tensor_parallel_size} x {gpu.name}: no memory is left for the KV cache"
        )
    return plan.baseline.kv_blocks, plan.speculative.kv_blocks if req.method else None


def _rates_for(req: SimRequest) -> AcceptanceRates | None:
    if req.method is None:
        return None
    k = req.num_speculative_tokens or 4
    if req.acceptance:
        return AcceptanceRates(per_position=req.acceptance, source=req.acceptance_source or "given")
    return AcceptanceRates(
        per_position=[ASSUMED_CONDITIONAL_ACCEPTANCE ** (i + 1) for i in range(k)], source="assumed (no --acceptance)"
    )


def _speedups(base: ArmMetrics, spec: ArmMetrics) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        b, s = getattr(base, name).p50, getattr(spec, name).p50
        if b and s:
            out[name] = round(b / s, 4)
    if base.throughput_tokens_per_s:
        out["throughput_tokens_per_s"] = round(spec.throughput_tokens_per_s / base.throughput_tokens_per_s, 4)
    return out


def crossover(points: list[RatePoint], metric: str) -> float | None:
    """The lowest rate where the speed-up falls to 1 or below, after a rate where it was above 1."""
    paid = False
    for p in points:
        s = p.speedup.get(metric)
        if s is None:
            continue
        if s > 1.0:
            paid = True
        elif paid:
            return p.rate
    return None


@dataclass(frozen=True)
class BuiltArms:
    """What both arms are made of: the step-time model, each arm's KV pool, the speculation (None without --method)."""

    target: ModelEntry
    gpu: GpuEntry
    draft: ModelEntry | None
    step: StepTime
    step_desc: str
    blocks_base: int
    blocks_spec: int | None
    rates: AcceptanceRates | None
    speculation: Speculation | None
    warnings: list[str]
    max_num_seqs: int
    max_num_batched_tokens: int

    def engine_config(self, req: SimRequest, speculative: bool) -> EngineConfig:
        """One arm's engine: the baseline, or (``speculative``) the one with the speculation and its smaller pool."""
        config: dict[str, object] = dict(
            block_size=req.block_size, max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens
        )
        if req.engine == "v0":
            config.update(chunked_prefill=False, prefill_first=True, batch_expansion=speculative)
        if not speculative:
            return EngineConfig(num_kv_blocks=self.blocks_base, **config)  # type: ignore[arg-type]
        if self.speculation is None or self.blocks_spec is None:
            raise OptionError("a speculative arm needs --method")
        return EngineConfig(num_kv_blocks=self.blocks_spec, speculation=self.speculation, **config)  # type: ignore[arg-type]


def build_arms(req: SimRequest) -> BuiltArms:
    """Resolve the catalogs and build the step-time model, KV pools and speculation that both arms share."""
    target = resolve_model(req.target)
    gpu = resolve_gpu(req.gpu, None)  # no custom GPU: the step model needs a catalog GPU's bandwidth and FLOP/s
    assert gpu is not None
    check_tensor_parallel(target, req.tensor_parallel_size, "--tp")
    # a draft model is sized from the catalogs; an EAGLE/MTP head's name only goes into the emitted config
    draft = resolve_model(req.draft) if req.draft and req.method == "draft_model" else None
    step, step_desc = _step_model(req, target, gpu)
    blocks_base, blocks_spec = _kv_blocks(req, target, draft, gpu)
    rates = _rates_for(req)
    warnings: list[str] = []
    k = req.num_speculative_tokens or 0
    if rates is not None and rates.source.startswith("assumed"):
        warnings.append(
            f"acceptance assumed: a_i = {ASSUMED_CONDITIONAL_ACCEPTANCE}^i; give --acceptance-from your own 'bench' run "
            "or an 'assess' report for a prediction worth acting on"
        )
    elif rates is not None and k > rates.k:
        warnings.append(
            f"--num-speculative-tokens {k} is beyond the {rates.k} positions of the acceptance ({rates.source}): "
            f"positions {rates.k + 1}-{k} are extrapolated at the last position's conditional rate"
        )
    speculation = None
    if req.method is not None and rates is not None:
        speculation = Speculation(
            method=req.method,
            schedule=KSchedule(k),
            rates=rates.truncated(k),
            lookahead=K.lookahead_slots(req.method, k),
            proposer=_proposer(req, target, draft, gpu, step),
        )
    # unset limits are vLLM's own per-GPU defaults, as a server launched without them would run
    seqs, tokens = K.default_scheduler_limits(gpu.name)
    if req.engine == "v0":
        # V0 (0.6.x) defaulted to 256 sequences everywhere and, without chunked prefill, to a budget that holds a
        # whole prompt: max(max_model_len, 2048)
        seqs, tokens = 256, max(req.max_model_len or target.max_position_embeddings, 2048)
    return BuiltArms(
        target,
        gpu,
        draft,
        step,
        step_desc,
        blocks_base,
        blocks_spec,
        rates,
        speculation,
        warnings,
        max_num_seqs=req.max_num_seqs or seqs,
        max_num_batched_tokens=req.max_num_batched_tokens or tokens,
    )


def build_arm(req: SimRequest, speculative: bool) -> tuple[EngineConfig, StepTime]:
    """One arm's engine configuration and step-time model, as ``run_sim`` simulates it (``sim serve`` runs one)."""
    arms = build_arms(req)
    return arms.engine_config(req, speculative), arms.step


def _defaults_note(req: SimRequest, gpu: GpuEntry) -> str | None:
    unset = [name for name in ("max_num_seqs", "max_num_batched_tokens") if getattr(req, name) is None]
    where = "V0's default" if req.engine == "v0" else f"vLLM's default on {gpu.name}"
    return f"{' and '.join(unset)}: {where}" if unset else None


def run_sim(req: SimRequest) -> SimReport:
    arms = build_arms(req)
    target, gpu, draft, step, step_desc = arms.target, arms.gpu, arms.draft, arms.step, arms.step_desc
    blocks_base, blocks_spec, rates, speculation, warnings = (
        arms.blocks_base,
        arms.blocks_spec,
        arms.rates,
        arms.speculation,
        arms.warnings,
    )
    k = req.num_speculative_tokens or 0
    lengths = req.lengths or Lengths.fixed(req.prompt_len, req.output_len)
    warmup = req.warmup_s if req.warmup_s is not None else req.duration_s / 10
    if warmup >= req.duration_s:
        raise OptionError(f"--warmup {warmup:g} s must be shorter than --duration {req.duration_s:g} s")
    points: list[RatePoint] = []
    for rate in req.rates:
        rng = np.random.default_rng(req.seed)
        arrivals = arrival_times(req.arrivals, rate, req.duration_s, rng)
        if len(arrivals) == 0:
            raise OptionError(f"--rate {rate:g} over --duration {req.duration_s:g} s gives no request")
        prompts, outputs = draw_lengths(lengths, len(arrivals), rng)
        base = simulate_arm(arms.engine_config(req, False), step, arrivals, prompts, outputs, warmup, req.seed)
        spec = None
        if speculation is not None and blocks_spec is not None:
            spec = simulate_arm(
                arms.engine_config(req, True),
                step,
                arrivals,
                prompts,
                outputs,
                warmup,
                req.seed,
            )
        points.append(RatePoint(rate=rate, baseline=base, speculative=spec, speedup=_speedups(base, spec) if spec else {}))
    report = SimReport(
        tool_version=__version__,
        setup=SimSetup(
            target=target.name,
            gpu=gpu.name,
            tensor_parallel_size=req.tensor_parallel_size,
            method=req.method,
            draft=draft.name if draft else None,
            num_speculative_tokens=k or None,
            acceptance=rates.truncated(k) if rates else None,
            acceptance_source=rates.source if rates else None,
            workload=lengths.source,
            arrivals=req.arrivals.kind if req.arrivals.kind != "gamma" else f"gamma (shape {req.arrivals.burstiness:g})",
            duration_s=req.duration_s,
            warmup_s=warmup,
            max_num_seqs=arms.max_num_seqs,
            max_num_batched_tokens=arms.max_num_batched_tokens,
            scheduler_defaults=_defaults_note(req, gpu),
            num_kv_blocks_baseline=blocks_base,
            num_kv_blocks_speculative=blocks_spec,
            block_size=req.block_size,
            step_model=step_desc,
            engine=req.engine,
            seed=req.seed,
        ),
        rates=points,
        crossover_rate=crossover(points, req.crossover_metric),
        crossover_metric=req.crossover_metric,
        warnings=warnings,
        definitions=SIM_DEFINITIONS,
    )
    if speculation is not None and rates is not None:
        _add_k_schedule(report, req, step, speculation, rates, lengths, arms.max_num_seqs)
    return report


def _add_k_schedule(
    report: SimReport,
    req: SimRequest,
    step: StepTime,
    spec: Speculation,
    rates: AcceptanceRates,
    lengths: Lengths,
    max_num_seqs: int,
) -> None:
    k = req.num_speculative_tokens or 1
    context = int(lengths.mean_prompt + lengths.mean_output / 2)
    bands = best_k_bands(step, spec.proposer, rates, k, max_num_seqs, context)
    report.k_schedule = bands
    schedule = [(b.start, b.end, b.k) for b in bands]
    version = req.vllm_version or K.version_text(K.LATEST_KNOWN)
    findings = schedule_findings(schedule, k, req.method or "", version, model=req.draft)
    cfg: dict[str, object] = {"method": req.method, "num_speculative_tokens": k}
    if req.draft:
        cfg["model"] = req.draft
    cfg["num_speculative_tokens_per_batch_size"] = [list(band) for band in schedule]
    report.k_schedule_config = cfg
    report.k_schedule_findings = [f"{f.severity}: {f.key}: {f.message}" for f in findings]
    report.k_schedule_vllm_version = version
