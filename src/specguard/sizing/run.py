"""``specguard plan``: resolve the target, proposer and GPU, do the Gate 3 arithmetic, recommend and emit a config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specguard.embedded.runtime import default_runtime_dir, load_manifest
from specguard.errors import OptionError, ServerError, UsageError
from specguard.preflight.rules import RuleContext, check_config
from specguard.server_metrics.server_facts import ServerFacts, inspect_server
from specguard.sizing.catalog import GIB, GpuEntry, ModelEntry, check_tensor_parallel, resolve_gpu, resolve_model
from specguard.sizing.kv import kv_bytes_per_token
from specguard.sizing.memory_plan import (
    DEFAULT_NON_KV_RESERVE_GIB,
    DraftLayers,
    MemoryInputs,
    MemoryPlan,
    Side,
    SizingError,
    kv_dtype_bytes,
    model_weight_bytes,
    plan_memory,
    weight_bits,
)
from specguard.sizing.recommend import DEFAULT_K, Gate1Evidence, Recommendation, gate1_evidence, recommend
from specguard.validation import HttpUrl, read_input_text, version_option
from specguard.vllm import knowledge as K
from specguard.vllm.findings import Finding
from specguard.vllm.spec_forms import config_json, to_spec_args

MODEL_FREE = {"ngram", "ngram_gpu", "suffix"}


class PlanRequest(BaseModel):
    """What ``specguard plan`` is asked; the bounds are the command line's."""

    model_config = ConfigDict(allow_inf_nan=False)

    target: str = Field(min_length=1)
    gpu: str | None = None
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    kv_cache_memory_gib: float | None = Field(default=None, gt=0)
    tensor_parallel_size: int = Field(default=1, ge=1)
    draft: str | None = None
    method: str | None = None
    draft_layers: int | None = Field(default=None, ge=1)
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1)
    num_speculative_tokens: int | None = Field(default=None, ge=1)
    dtype: str | None = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    non_kv_reserve_gib: float = Field(default=DEFAULT_NON_KV_RESERVE_GIB, ge=0)
    max_model_len: int | None = Field(default=None, ge=1)
    block_size: int = Field(default=16, ge=1)
    prompt_len: int | None = Field(default=None, ge=1)
    output_len: int | None = Field(default=None, ge=1)
    expected_concurrency: int | None = Field(default=None, ge=1)
    gate1: Path | None = None
    vllm_version: str | None = None
    url: HttpUrl | None = None

    @model_validator(mode="before")
    @classmethod
    def _options_agree(cls, values: Any) -> Any:
        """Checked before any single field, as the command line always reported them first."""
        if isinstance(values, dict):
            if (values.get("prompt_len") is None) != (values.get("output_len") is None):
                raise OptionError("--prompt-len and --output-len go together")
            version_option(values.get("vllm_version"))
        return values


# The option of each PlanRequest field, for messages.
PLAN_OPTIONS = {
    "gpu_memory_gib": "--gpu-memory-gib",
    "kv_cache_memory_gib": "--kv-cache-memory-gib",
    "tensor_parallel_size": "--tp",
    "draft_layers": "--draft-layers",
    "draft_tensor_parallel_size": "--draft-tp",
    "num_speculative_tokens": "--num-speculative-tokens",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "non_kv_reserve_gib": "--non-kv-reserve-gib",
    "max_model_len": "--max-model-len",
    "block_size": "--block-size",
    "prompt_len": "--prompt-len",
    "output_len": "--output-len",
    "expected_concurrency": "--expected-concurrency",
    "url": "--url",
    "target": "--target",
}


class ModelSummary(BaseModel):
    name: str
    source: str
    params: float
    weight_dtype: str
    weight_bytes: float
    kv_bytes_per_token: int = Field(description="whole model, every layer, before any tensor-parallel split")
    num_layers: int
    attention: str


class ServerComparison(BaseModel):
    side: str
    server_blocks: int
    predicted_blocks: int
    error_percent: float
    block_size: int
    kv_budget: str


class PlanReport(BaseModel):
    target: ModelSummary
    draft: ModelSummary | None
    method: str | None
    num_speculative_tokens: int | None
    gpu: GpuEntry | None
    tensor_parallel_size: int
    vllm_version: str
    inputs: dict[str, Any]
    baseline: Side
    speculative: Side
    headroom_lost_percent: float
    concurrency_lost_percent: float | None
    warnings: list[str]
    notes: list[str]
    recommendation: Recommendation
    config: dict[str, Any] | None
    config_json: str | None
    spec_args: list[str] | None
    config_findings: list[Finding]
    server: ServerFacts | None = None
    server_comparison: ServerComparison | None = None


def _version(request: PlanRequest) -> tuple[str, str]:
    if request.vllm_version:
        return request.vllm_version, "--vllm-version"
    runtime = load_manifest(default_runtime_dir())
    if runtime is not None:
        return runtime.vllm_version, "the embedded runtime"
    return K.version_text(K.LATEST_KNOWN), "latest release specguard knows"


def _summary(m: ModelEntry, dtype: str, kv_bytes: int) -> ModelSummary:
    return ModelSummary(
        name=m.name,
        source=m.source,
        params=m.params,
        weight_dtype=dtype,
        weight_bytes=model_weight_bytes(m, dtype),
        kv_bytes_per_token=kv_bytes_per_token(m.shape, kv_bytes, 1),
        num_layers=m.shape.num_layers,
        attention="MLA" if m.shape.is_mla else f"GQA {m.shape.num_kv_heads} KV heads x {m.shape.head_dim}",
    )


def _draft_layers(
    method: str | None, k: int, target: ModelEntry, draft: ModelEntry | None, req: PlanRequest, dtype: str, notes: list[str]
) -> DraftLayers | None:
    if method is None or method in MODEL_FREE or method == "custom_class":
        return None
    dtp = req.draft_tensor_parallel_size or req.tensor_parallel_size
    canon = K.canonical_method(method)
    bits = weight_bits(dtype)
    if canon == "mtp":
        if not target.mtp_layers:
            raise SizingError(f"method mtp needs MTP layers, and {target.name} has none")
        shape = target.shape.model_copy(update={"num_layers": target.mtp_layers})
        weights = (target.mtp_params or target.mtp_layers * target.decoder_layer_params) * bits / 8
    elif draft is not None:
        shape = draft.shape
        weights = model_weight_bytes(draft, dtype)
    elif canon in ("eagle", "eagle3", "dflash"):
        layers = req.draft_layers or 1
        shape = target.shape.model_copy(update={"num_layers": layers})
        weights = layers * target.decoder_layer_params * bits / 8
        notes.append(
            f"{method} head estimated as {layers} decoder layer(s) with the target's attention shape; "
            "give the head's directory with --draft for its real size"
        )
    else:
        raise SizingError(f"method {method} needs a draft: give --draft NAME_OR_DIR")
    # Medusa and MLP-speculator heads have weights but no attention: nothing in the KV pool.
    return DraftLayers(
        shape=shape if K.uses_draft_kv(method) else None,
        tensor_parallel_size=dtp,
        weight_bytes=weights,
        lookahead_slots=K.lookahead_slots(method, k),
    )


def _config(method: str | None, k: int | None, draft: ModelEntry | None, req: PlanRequest) -> dict[str, Any] | None:
    if method is None:
        return None
    cfg: dict[str, Any] = {"method": method}
    if draft is not None and method not in MODEL_FREE:
        cfg["model"] = req.draft
    if k is not None:
        cfg["num_speculative_tokens"] = k
    if method == "ngram":
        cfg.update(prompt_lookup_min=2, prompt_lookup_max=5)
    if req.draft_tensor_parallel_size is not None:
        cfg["draft_tensor_parallel_size"] = req.draft_tensor_parallel_size
    return cfg


def _evidence(path: Path | None) -> Gate1Evidence | None:
    if path is None:
        return None
    text = read_input_text(path, "Gate 1 report")
    try:
        return gate1_evidence(json.loads(text), str(path))
    except (ValueError, KeyError, TypeError) as exc:
        raise SizingError(f"--gate1 {path}: cannot read a Gate 1 JSON report ({exc})") from exc


GPU_HINT = "use --gpu-memory-gib for a custom size"


def _check_names(req: PlanRequest) -> None:
    """The GPU and dtype names, refused before anything is resolved or any server is asked."""
    resolve_gpu(req.gpu, req.gpu_memory_gib, custom_hint=GPU_HINT)
    try:
        if req.dtype is not None:
            weight_bits(req.dtype)
    except UsageError as exc:
        raise OptionError(f"--dtype {req.dtype}: {exc}") from exc
    try:
        kv_dtype_bytes(req.kv_cache_dtype, "bfloat16")
    except UsageError as exc:
        raise OptionError(f"--kv-cache-dtype {req.kv_cache_dtype}: {exc}") from exc


def _server(req: PlanRequest, api_key: str | None) -> ServerFacts | None:
    """The --url server's facts; one that cannot be reached is a runtime failure, not a plan without it."""
    if not req.url:
        return None
    server = inspect_server(req.url, api_key)
    if not server.reachable:
        raise ServerError(f"{req.url}: not reachable ({'; '.join(server.errors)})")
    return server


def build_plan(req: PlanRequest, api_key: str | None = None) -> PlanReport:
    _check_names(req)
    target = resolve_model(req.target)
    draft = resolve_model(req.draft) if req.draft else None
    check_tensor_parallel(target, req.tensor_parallel_size, "--tp")
    if draft is not None:
        check_tensor_parallel(draft, req.draft_tensor_parallel_size or req.tensor_parallel_size, "--draft-tp")
    version_text, version_source = _version(req)
    version = K.parse_version(version_text)
    notes = [f"vLLM version {version_text} from {version_source}"]
    evidence = _evidence(req.gate1)
    rec = recommend(target, draft, req.method, evidence)
    if evidence and req.prompt_len is None and evidence.mean_prompt_tokens and evidence.mean_output_tokens:
        req = req.model_copy(
            update={"prompt_len": round(evidence.mean_prompt_tokens), "output_len": round(evidence.mean_output_tokens)}
        )
        notes.append(f"workload lengths from Gate 1 ({evidence.source}): {req.prompt_len} prompt, {req.output_len} output tokens")
    method = rec.method
    k = req.num_speculative_tokens or rec.num_speculative_tokens or DEFAULT_K.get(method or "", None)
    dtype = req.dtype or target.native_dtype
    kv_bytes = kv_dtype_bytes(req.kv_cache_dtype, dtype)
    draft_layers = _draft_layers(method, k or 0, target, draft, req, req.dtype or (draft or target).native_dtype, notes)
    if target.sliding_window_layers:
        notes.append(
            f"{target.sliding_window_layers} of {target.shape.num_layers} layers use a sliding window; they "
            "are counted as full attention, so capacity here is a lower bound"
        )
    if method == "suffix":
        notes.append("suffix decoding keeps its trees in host memory, not the KV cache")
    server = _server(req, api_key)
    gpu = resolve_gpu(req.gpu, req.gpu_memory_gib, custom_hint=GPU_HINT)
    target_summary = _summary(target, dtype, kv_bytes)
    inputs = MemoryInputs(
        target_shape=target.shape,
        target_weight_bytes=target_summary.weight_bytes,
        tensor_parallel_size=req.tensor_parallel_size,
        gpu_memory_bytes=gpu.memory_bytes if gpu else None,
        gpu_memory_utilization=req.gpu_memory_utilization or K.default_gpu_memory_utilization(version),
        kv_cache_memory_bytes=int(req.kv_cache_memory_gib * GIB) if req.kv_cache_memory_gib is not None else None,
        non_kv_reserve_bytes=req.non_kv_reserve_gib * GIB,
        kv_dtype_bytes=kv_bytes,
        block_size=req.block_size,
        max_model_len=req.max_model_len or target.max_position_embeddings,
        prompt_len=req.prompt_len,
        output_len=req.output_len,
        expected_concurrency=req.expected_concurrency,
    )
    budget = None
    if server is not None and server.num_gpu_blocks is not None:
        inputs, budget = _with_server_cache(inputs, server)
    plan: MemoryPlan = plan_memory(inputs, draft_layers)
    comparison = _compare(plan, server, budget, inputs.block_size) if server is not None and budget else None
    cfg = _config(method, k, draft, req)
    if cfg and draft is not None and draft.source == "catalog":
        notes.append(f"'{req.draft}' is a catalog name: put the draft's repository id or local path in 'model'")
    findings = (
        check_config(
            cfg,
            RuleContext(
                version=version, tensor_parallel_size=req.tensor_parallel_size, target_max_model_len=inputs.max_model_len
            ),
        )
        if cfg
        else []
    )
    return PlanReport(
        target=target_summary,
        draft=_summary(draft, req.dtype or draft.native_dtype, kv_bytes) if draft else None,
        method=method,
        num_speculative_tokens=k if method else None,
        gpu=gpu,
        tensor_parallel_size=req.tensor_parallel_size,
        vllm_version=version_text,
        inputs=inputs.model_dump(exclude={"target_shape"}),
        baseline=plan.baseline,
        speculative=plan.speculative,
        headroom_lost_percent=plan.headroom_lost_percent,
        concurrency_lost_percent=plan.concurrency_lost_percent,
        warnings=plan.warnings + rec.cautions,
        notes=notes,
        recommendation=rec,
        config=cfg,
        config_json=config_json(cfg) if cfg else None,
        spec_args=to_spec_args(cfg, version) if cfg else None,
        config_findings=findings,
        server=server,
        server_comparison=comparison,
    )


def _with_server_cache(inputs: MemoryInputs, server: ServerFacts) -> tuple[MemoryInputs, str]:
    """The inputs with the server's own cache settings, and how its KV budget is set."""
    cache = server.cache_config or {}
    update: dict[str, Any] = {"block_size": server.block_size or inputs.block_size}
    budget = "gpu_memory_utilization x GPU memory - weights - reserve"
    fixed = cache.get("kv_cache_memory_bytes")
    if fixed not in (None, "", "None"):
        update["kv_cache_memory_bytes"] = int(float(fixed))
        budget = f"kv_cache_memory_bytes={int(float(fixed))} (reported by the server)"
    elif cache.get("gpu_memory_utilization") not in (None, "", "None"):
        update["gpu_memory_utilization"] = float(cache["gpu_memory_utilization"])
    return inputs.model_copy(update=update), budget


def _compare(plan: MemoryPlan, server: ServerFacts, budget: str, block_size: int) -> ServerComparison:
    """The prediction for the side the server runs (speculation on or off) beside its num_gpu_blocks."""
    side = plan.speculative if server.speculation_on else plan.baseline
    actual = server.num_gpu_blocks or 0
    error = 100.0 * (side.kv_blocks - actual) / actual if actual else 0.0
    return ServerComparison(
        side="speculative" if server.speculation_on else "baseline",
        server_blocks=actual,
        predicted_blocks=side.kv_blocks,
        error_percent=round(error, 3),
        block_size=block_size,
        kv_budget=budget,
    )
