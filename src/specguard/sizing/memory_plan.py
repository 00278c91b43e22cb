"""Gate 3 arithmetic: weights, KV blocks and concurrency per GPU, without and with speculation. Pure.

The budget is vLLM V1's (vllm-facts.md section 6): ``gpu_memory_utilization``
of the GPU, minus weights and a non-KV reserve for activations, CUDA graphs and
the CUDA context, unless ``kv_cache_memory_bytes`` fixes the KV budget outright
(as ``VLLM_CPU_KVCACHE_SPACE`` does on CPU). Draft layers share the target's
block pool, so each block costs their pages too; n-gram and suffix add none.
The scheduler also reserves lookahead slots per running request.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from specguard.errors import UsageError
from specguard.sizing.catalog import GIB, ModelEntry
from specguard.sizing.kv import DTYPE_BYTES, AttentionShape, kv_bytes_per_token

# Bits per weight, scales included (group-128 int4 carries an fp16 scale and zero: 4 + 32/128).
WEIGHT_BITS = {
    "bfloat16": 16,
    "float16": 16,
    "half": 16,
    "float32": 32,
    "fp8": 8,
    "int8": 8,
    "w8a8": 8,
    "awq": 4.25,
    "gptq": 4.25,
    "int4": 4.25,
    "mxfp4": 4.25,
    "nvfp4": 4.5,
}
DEFAULT_NON_KV_RESERVE_GIB = 2.0


class SizingError(UsageError):
    """Sizing inputs that cannot be used: an unknown dtype, no memory to size with, a method without its draft."""

    code = "bad_sizing_input"


def weight_bits(dtype: str) -> float:
    try:
        return WEIGHT_BITS[dtype.lower()]
    except KeyError:
        raise SizingError(f"unknown weight dtype or quantization '{dtype}': one of {', '.join(WEIGHT_BITS)}") from None


def model_weight_bytes(m: ModelEntry, dtype: str) -> float:
    """The local weight files' size when they are in that dtype, else parameters x bits."""
    return m.weight_bytes if m.weight_bytes and dtype == m.native_dtype else m.params * weight_bits(dtype) / 8


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    key = model_dtype if kv_cache_dtype == "auto" else kv_cache_dtype
    if kv_cache_dtype == "auto" and key.lower() in ("fp8", "mxfp4", "awq", "gptq", "int4", "nvfp4", "w8a8", "int8"):
        key = "bfloat16"  # quantized weights compute in bf16, so "auto" keeps a bf16 KV cache
    try:
        return DTYPE_BYTES[key.lower()]
    except KeyError:
        raise SizingError(f"unknown KV-cache dtype '{key}': one of {', '.join(DTYPE_BYTES)}") from None


class DraftLayers(BaseModel):
    """The speculative side's KV layers and weights (none for n-gram and suffix)."""

    shape: AttentionShape | None = None
    tensor_parallel_size: int = 1
    weight_bytes: float = 0.0
    lookahead_slots: int = 0


class MemoryInputs(BaseModel):
    target_shape: AttentionShape
    target_weight_bytes: float = Field(description="whole model")
    tensor_parallel_size: int = 1
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.92
    kv_cache_memory_bytes: int | None = Field(default=None, description="fixed KV budget per GPU, bypasses profiling")
    non_kv_reserve_bytes: float = DEFAULT_NON_KV_RESERVE_GIB * GIB
    kv_dtype_bytes: int = 2
    block_size: int = 16
    max_model_len: int
    prompt_len: int | None = None
    output_len: int | None = None
    expected_concurrency: int | None = None


class Side(BaseModel):
    """One server configuration (baseline or speculative) on one GPU."""

    weights_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: int
    kv_blocks: int
    kv_tokens: int
    kv_gib: float
    lookahead_slots: int
    tokens_per_sequence: int | None
    max_concurrency: int | None = Field(description="sequences of the workload's length that fit at once")
    max_concurrency_at_max_model_len: float


class MemoryPlan(BaseModel):
    baseline: Side
    speculative: Side
    headroom_lost_percent: float = Field(description="KV tokens the speculative side gives up, in percent")
    concurrency_lost_percent: float | None = None
    warnings: list[str] = Field(default_factory=list)


def _side(inp: MemoryInputs, draft: DraftLayers | None) -> Side:
    tp = inp.tensor_parallel_size
    weights = inp.target_weight_bytes / tp + (draft.weight_bytes / draft.tensor_parallel_size if draft else 0.0)
    if inp.kv_cache_memory_bytes is not None:
        budget = float(inp.kv_cache_memory_bytes)
    elif inp.gpu_memory_bytes is not None:
        budget = math.ceil(inp.gpu_memory_bytes * inp.gpu_memory_utilization) - weights - inp.non_kv_reserve_bytes
    else:
        raise SizingError("no memory to plan with: give a GPU, --gpu-memory-gib or --kv-cache-memory-gib")
    per_token = kv_bytes_per_token(inp.target_shape, inp.kv_dtype_bytes, tp)
    if draft and draft.shape is not None:
        per_token += kv_bytes_per_token(draft.shape, inp.kv_dtype_bytes, draft.tensor_parallel_size)
    # Each block holds one page in every layer, target and draft: the block costs block_size x per-token bytes.
    blocks = int(max(budget, 0)) // (per_token * inp.block_size)
    tokens = blocks * inp.block_size
    lookahead = draft.lookahead_slots if draft else 0
    per_seq = None
    concurrency = None
    if inp.prompt_len is not None and inp.output_len is not None:
        per_seq = inp.prompt_len + inp.output_len + lookahead
        concurrency = blocks // math.ceil(per_seq / inp.block_size)
    return Side(
        weights_bytes_per_gpu=weights,
        kv_budget_bytes_per_gpu=budget,
        kv_bytes_per_token_per_gpu=per_token,
        kv_blocks=blocks,
        kv_tokens=tokens,
        kv_gib=blocks * inp.block_size * per_token / GIB,
        lookahead_slots=lookahead,
        tokens_per_sequence=per_seq,
        max_concurrency=concurrency,
        max_concurrency_at_max_model_len=round(tokens / inp.max_model_len, 2),
    )


def plan_memory(inp: MemoryInputs, draft: DraftLayers | None) -> MemoryPlan:
    """Both sides, the headroom speculation costs, and warnings an operator must see before benchmarking."""
    base, spec = _side(inp, None), _side(inp, draft)
    warnings = []
    for name, side in (("baseline", base), ("speculative", spec)):
        if side.kv_budget_bytes_per_gpu <= 0:
            warnings.append(f"{name}: weights and reserve exceed the memory budget: nothing is left for the KV cache")
        elif side.kv_tokens < inp.max_model_len:
            warnings.append(
                f"{name}: the KV cache ({side.kv_tokens} tokens) cannot hold one max_model_len "
                f"({inp.max_model_len}) sequence; vLLM refuses to start"
            )
    lost = 100.0 * (1 - spec.kv_tokens / base.kv_tokens) if base.kv_tokens else 0.0
    conc_lost = None
    if base.max_concurrency and spec.max_concurrency is not None:
        conc_lost = 100.0 * (1 - spec.max_concurrency / base.max_concurrency)
    want = inp.expected_concurrency
    if want is not None and spec.max_concurrency is not None and base.max_concurrency is not None:
        if spec.max_concurrency < want <= base.max_concurrency:
            warnings.append(
                f"speculation pushes the expected concurrency ({want}) past the KV capacity: "
                f"{spec.max_concurrency} sequences fit with it, {base.max_concurrency} without; expect "
                "queueing and preemption"
            )
        elif want > base.max_concurrency:
            warnings.append(
                f"the expected concurrency ({want}) is past the KV capacity even without speculation "
                f"({base.max_concurrency} sequences)"
            )
    return MemoryPlan(
        baseline=base,
        speculative=spec,
        headroom_lost_percent=round(lost, 2),
        concurrency_lost_percent=None if conc_lost is None else round(conc_lost, 2),
        warnings=warnings,
    )
