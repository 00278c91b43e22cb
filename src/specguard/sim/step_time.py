"""How long one engine step takes: a roofline from the catalogs, or a linear profile fitted to a user's runs. Pure.

A vLLM V1 step runs one forward pass over every scheduled token of every
scheduled request. Per tensor-parallel rank, the roofline charges:

  memory    (weights / tp + KV of every scheduled token's context) / (HBM bandwidth x bandwidth efficiency)
  compute   2 x parameters / tp x batched tokens / (peak FLOP/s x compute efficiency)
  attention 4 x layers x query width / tp x sum(new tokens x context) / (peak FLOP/s x attention efficiency)
  all-reduce, with tp > 1: two per layer of batched tokens x hidden x 2 bytes, ring algorithm
             (2 (tp - 1) / tp of the bytes over one link), plus a fixed latency each

  step = fixed overhead + max(memory, compute + attention) + all-reduce

The efficiencies and overheads are defaults an experienced operator would
recognise (70-80 % of HBM bandwidth in decode, about half of peak in GEMMs);
``sim calibrate`` replaces the whole model with the three coefficients of a
linear fit to the user's own runs, which is what to trust on real hardware.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from specguard.sizing.catalog import GpuEntry, ModelEntry
from specguard.sizing.kv import kv_bytes_per_token
from specguard.sizing.memory_plan import model_weight_bytes

ACT_BYTES = 2  # bf16 activations in the all-reduce


@dataclass(frozen=True)
class StepLoad:
    """What one step computes, summed over its scheduled requests."""

    seqs: int
    batched_tokens: int
    context_tokens: int = 0  # tokens whose KV the step reads or writes: each request's context plus its new tokens
    attention_pairs: float = 0.0  # sum over requests of new tokens x context: attention's query-key products
    expanded_seqs: int = 0  # V0 batch expansion: the extra sequences its scorer made of the requests' drafts

    @property
    def scored_seqs(self) -> int:
        """Sequences the engine prepares inputs for and samples: the requests, plus V0's expanded ones."""
        return self.seqs + self.expanded_seqs


class StepTime(Protocol):
    """Seconds one forward pass of the target takes for a load."""

    def __call__(self, load: StepLoad) -> float: ...


class RooflineCoefficients(BaseModel):
    bandwidth_efficiency: float = Field(default=0.75, gt=0, le=1)
    compute_efficiency: float = Field(default=0.55, gt=0, le=1)
    attention_efficiency: float = Field(default=0.35, gt=0, le=1)
    fixed_overhead_s: float = Field(default=0.0015, ge=0, description="scheduler, sampler, launch gaps per step")
    allreduce_latency_s: float = Field(default=8e-6, ge=0, description="per all-reduce, with tp > 1")
    per_seq_overhead_s: float = Field(default=0.0, ge=0, description="CPU time per scheduled sequence (V0: see V0_COSTS)")


@dataclass(frozen=True)
class ModelCost:
    """A model's per-rank bytes and FLOPs: what the roofline needs of it."""

    weight_bytes_per_rank: float
    kv_bytes_per_token_per_rank: int
    params_per_rank: float
    attention_width_per_rank: float  # layers x query heads x head dim / tp
    layers: int
    hidden_size: int
    tp: int

    @staticmethod
    def of(model: ModelEntry, tp: int = 1, dtype: str | None = None, kv_dtype_bytes: int = 2) -> ModelCost:
        shape = model.shape
        heads = model.num_attention_heads or max(1, model.hidden_size // max(shape.head_dim, 1))
        head_dim = shape.head_dim or model.hidden_size // heads
        return ModelCost(
            weight_bytes_per_rank=model_weight_bytes(model, dtype or model.native_dtype) / tp,
            kv_bytes_per_token_per_rank=kv_bytes_per_token(shape, kv_dtype_bytes, tp),
            params_per_rank=model.params / tp,
            attention_width_per_rank=shape.num_layers * heads * head_dim / tp,
            layers=shape.num_layers,
            hidden_size=model.hidden_size,
            tp=tp,
        )


@dataclass(frozen=True)
class Roofline:
    """The roofline step time of one model on one GPU type (see the module docstring)."""

    cost: ModelCost
    gpu: GpuEntry
    coefficients: RooflineCoefficients = field(default_factory=RooflineCoefficients)

    def __post_init__(self) -> None:
        if not (self.gpu.hbm_bytes_per_s and self.gpu.bf16_flops):
            raise ValueError(f"GPU {self.gpu.name} has no bandwidth or FLOP/s in the catalog")

    def parts(self, load: StepLoad) -> dict[str, float]:
        c, k, g = self.cost, self.coefficients, self.gpu
        bw = (g.hbm_bytes_per_s or 0.0) * k.bandwidth_efficiency
        flops = g.bf16_flops or 0.0
        memory = (c.weight_bytes_per_rank + load.context_tokens * c.kv_bytes_per_token_per_rank) / bw
        compute = 2 * c.params_per_rank * load.batched_tokens / (flops * k.compute_efficiency)
        attention = 4 * c.attention_width_per_rank * load.attention_pairs / (flops * k.attention_efficiency)
        allreduce = 0.0
        if c.tp > 1:
            link = g.link_bytes_per_s or 0.0
            per = load.batched_tokens * c.hidden_size * ACT_BYTES * 2 * (c.tp - 1) / c.tp
            allreduce = 2 * c.layers * (k.allreduce_latency_s + (per / link if link else 0.0))
        return {
            "fixed": k.fixed_overhead_s + k.per_seq_overhead_s * load.scored_seqs,
            "memory": memory,
            "compute": compute + attention,
            "allreduce": allreduce,
        }

    @cached_property
    def _constants(self) -> tuple[float, float, float, float, float, float, float]:
        """Seconds per unit of each term, so that a call is a few multiplications (the engine makes one per step)."""
        c, k, g = self.cost, self.coefficients, self.gpu
        bw = (g.hbm_bytes_per_s or 0.0) * k.bandwidth_efficiency
        flops = g.bf16_flops or 0.0
        link = g.link_bytes_per_s or 0.0
        per_token_ar = 0.0
        fixed_ar = 0.0
        if c.tp > 1:
            fixed_ar = 2 * c.layers * k.allreduce_latency_s
            per_token_ar = 2 * c.layers * c.hidden_size * ACT_BYTES * 2 * (c.tp - 1) / c.tp / link if link else 0.0
        return (
            k.fixed_overhead_s + fixed_ar,
            c.weight_bytes_per_rank / bw,
            c.kv_bytes_per_token_per_rank / bw,
            2 * c.params_per_rank / (flops * k.compute_efficiency),
            4 * c.attention_width_per_rank / (flops * k.attention_efficiency),
            per_token_ar,
            k.per_seq_overhead_s,
        )

    def __call__(self, load: StepLoad) -> float:
        fixed, weights, per_kv, per_tok, per_pair, per_tok_ar, per_seq = self._constants
        memory = weights + per_kv * load.context_tokens
        compute = per_tok * load.batched_tokens + per_pair * load.attention_pairs
        return fixed + per_seq * load.scored_seqs + (memory if memory > compute else compute) + per_tok_ar * load.batched_tokens


class LinearProfile(BaseModel):
    """``sim calibrate``'s fit: step = fixed + per KV token x context tokens + per batched token x batched tokens."""

    fixed_s: float = Field(ge=0)
    per_kv_token_s: float = Field(ge=0)
    per_batched_token_s: float = Field(ge=0)

    def __call__(self, load: StepLoad) -> float:
        return self.fixed_s + self.per_kv_token_s * load.context_tokens + self.per_batched_token_s * load.batched_tokens

    def scaled(self, params_ratio: float, kv_ratio: float) -> LinearProfile:
        """A draft model's profile on the same hardware: weights-driven terms by parameters, KV by bytes per token."""
        return LinearProfile(
            fixed_s=self.fixed_s * params_ratio,
            per_kv_token_s=self.per_kv_token_s * kv_ratio,
            per_batched_token_s=self.per_batched_token_s * params_ratio,
        )


def draft_profile(target_profile: LinearProfile, target: ModelCost, draft: ModelCost) -> LinearProfile:
    """A draft model's profile from its target's calibrated one: weights-driven terms by parameters, KV by bytes."""
    return target_profile.scaled(
        draft.params_per_rank / target.params_per_rank, draft.kv_bytes_per_token_per_rank / target.kv_bytes_per_token_per_rank
    )


ProposerKind = Literal["none", "ngram", "suffix", "draft_model", "eagle", "mtp"]
# CPU-side proposers: vLLM's n-gram matcher (numba) and Arctic's suffix tree take tens of microseconds per
# request per step, beside a target step of milliseconds.
CPU_PROPOSER_S_PER_SEQ = {"ngram": 10e-6, "suffix": 30e-6}
# A draft or head pass inside a step pays no scheduling, input preparation or sampling of its own: vLLM V1 runs
# the k passes back to back as CUDA-graph replays inside the step whose fixed overhead is charged once. A pass
# costs its roofline plus this launch time. With the step's 1.5 ms charged per pass instead, EAGLE-3 on
# Llama-3.1-8B/H100 at batch 1 came out 1.22x against SpecDecode-Bench's measured 1.71x (docs/validation.md).
DRAFT_PASS_OVERHEAD_S = 1e-4


@dataclass(frozen=True)
class V0Costs:
    """vLLM V0's CPU costs, from published V0 measurements (not from the results it is compared with).

    draft_pass_s: a V0 draft pass ran the draft's whole model runner (input preparation, sampling) on its own.
    SpecDecodeWorker's logged "average_time_per_proposal_tok_ms" was 5.56 ms for Qwama-0.5B at batch 16 on an A10
    (vLLM PR #9298, v0.6.3.post2, CUDA graphs), whose roofline pass is about 2.2 ms (1 GB at 75 % of 600 GB/s):
    3.4 ms of CPU; and 4.96 ms for a 7B GPTQ draft at TP 4, batch 2 (issue #8370), about 4 ms above its GPU time.
    per_seq_s: CPU time per scheduled sequence per step: the same PR's scoring step took 43.3 ms for 16 requests
    expanded to 64 sequences (k = 3) where the roofline gives 37 ms: 6 ms, about 0.1 ms a sequence. The v0.6.0
    post (profiled on v0.5.3, Llama 3 8B, 1xH100) puts scheduling and input preparation at 29 % of the time.
    """

    draft_pass_s: float = 3.5e-3
    per_seq_s: float = 1e-4


V0_COSTS = V0Costs()
EAGLE_HEAD_FRACTION = 1.0  # an EAGLE/MTP head is about one target decoder layer (sizing/catalog.decoder_layer_params)


@dataclass(frozen=True)
class ProposerCost:
    """Seconds the proposer adds to a step: k sequential passes of a draft, a head, or CPU matching."""

    kind: ProposerKind
    draft_step: StepTime | None = None  # draft_model: its own step time; eagle/mtp: the head's

    def __call__(self, decode_seqs: int, k: int, context_tokens: int) -> float:
        if k <= 0 or decode_seqs == 0 or self.kind == "none":
            return 0.0
        if self.kind in CPU_PROPOSER_S_PER_SEQ:
            return CPU_PROPOSER_S_PER_SEQ[self.kind] * decode_seqs
        assert self.draft_step is not None
        # The first pass takes the tokens the target just accepted (about two per request); the others one each.
        first = self.draft_step(StepLoad(decode_seqs, 2 * decode_seqs, context_tokens, 2.0 * context_tokens))
        rest = self.draft_step(StepLoad(decode_seqs, decode_seqs, context_tokens, float(context_tokens)))
        return first + (k - 1) * rest


def head_cost(target: ModelEntry, tp: int, dtype: str | None = None, kv_dtype_bytes: int = 2) -> ModelCost:
    """An EAGLE/MTP head: about one decoder layer, plus the target's LM head it reads each pass."""
    full = ModelCost.of(target, tp, dtype, kv_dtype_bytes)
    layer = target.decoder_layer_params * EAGLE_HEAD_FRACTION
    lm_head = target.vocab_size * target.hidden_size
    bytes_per_param = full.weight_bytes_per_rank / max(full.params_per_rank, 1.0)
    return ModelCost(
        weight_bytes_per_rank=(layer + lm_head) * bytes_per_param / tp,
        kv_bytes_per_token_per_rank=full.kv_bytes_per_token_per_rank // max(full.layers, 1),
        params_per_rank=(layer + lm_head) / tp,
        attention_width_per_rank=full.attention_width_per_rank / max(full.layers, 1),
        layers=1,
        hidden_size=full.hidden_size,
        tp=tp,
    )
