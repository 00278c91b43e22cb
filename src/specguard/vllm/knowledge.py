"""What each vLLM release accepts for speculative decoding (vllm-facts.md sections 1, 2 and 6). Pure.

These tables are specguard's knowledge for when vLLM itself cannot be asked
(a remote host, another machine). Where the installed vLLM can be imported,
preflight asks it, and a test checks these tables against the embedded one.
Versions 0.26 to 0.29 were never read: a feature first seen in 0.30 may have
arrived in that window, which ``UNREAD_VERSIONS`` lets findings say.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from specguard.errors import UsageError

Version = tuple[int, int, int]
LATEST_KNOWN: Version = (0, 33, 0)
UNREAD_VERSIONS: tuple[Version, Version] = ((0, 26, 0), (0, 29, 99))


class VersionParseError(UsageError):
    pass


def parse_version(text: str) -> Version:
    """``0.32.0``, ``0.32.0+cpu``, ``v0.11.0rc1``, ``0.10.1.1`` -> (major, minor, patch)."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not match:
        raise VersionParseError(f"not a vLLM version: {text!r} (expected MAJOR.MINOR.PATCH, such as 0.32.0)")
    return int(match[1]), int(match[2]), int(match[3] or 0)


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
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp",
    "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp",
    "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
)
# (method, first version, first version without it); aliases whose arrival between 0.12 and 0.31 was not read
# are listed from 0.32, where the installed literal was checked, and reported as unconfirmed before.
_METHOD_SPANS: list[tuple[str, Version, Version | None]] = [
    ("ngram", (0, 8, 3), None), ("eagle", (0, 8, 3), None), ("draft_model", (0, 8, 3), None),
    ("medusa", (0, 8, 3), (0, 33, 0)), ("mlp_speculator", (0, 8, 3), (0, 33, 0)),
    ("deepseek_mtp", (0, 9, 0), None), ("eagle3", (0, 9, 2), None),
    ("ernie_mtp", (0, 10, 2), None), ("qwen3_next_mtp", (0, 10, 2), None),
    ("mimo_mtp", (0, 11, 0), None), ("longcat_flash_mtp", (0, 11, 0), None), ("mtp", (0, 11, 0), None),
    ("suffix", (0, 12, 0), None), ("extract_hidden_states", (0, 17, 0), None), ("ngram_gpu", (0, 18, 0), None),
    ("dflash", (0, 20, 0), None), ("custom_class", (0, 22, 0), None), ("dspark", (0, 25, 0), None),
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
    *[(f, None, None) for f in ("model", "method", "num_speculative_tokens", "draft_tensor_parallel_size",
                                "quantization", "max_model_len", "revision", "code_revision", "prompt_lookup_max",
                                "prompt_lookup_min", "enforce_eager", "tensor_parallel_size")],
    *[(f, None, (0, 10, 0)) for f in ("acceptance_method", "posterior_threshold", "posterior_alpha", "disable_mqa_scorer")],
    ("disable_logprobs", None, (0, 12, 0)),
    ("disable_by_batch_size", None, (0, 16, 0)),
    ("speculative_token_tree", None, (0, 21, 0)),
    ("disable_padded_drafter_batch", (0, 11, 0), None),
    *[(f, (0, 12, 0), None) for f in ("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
                                      "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")],
    *[(f, (0, 20, 0), None) for f in ("moe_backend", "draft_load_config", "use_local_argmax_reduction",
                                      "parallel_drafting", "rejection_sample_method", "synthetic_acceptance_rates",
                                      "synthetic_acceptance_length")],
    *[(f, (0, 25, 0), None) for f in ("attention_backend", "use_heterogeneous_vocab",
                                      "num_speculative_tokens_per_batch_size", "draft_sample_method", "dspark_draft_topk")],
    *[(f, (0, 30, 0), None) for f in ("kv_cache_dtype", "index_share_for_mtp_iteration", "disable_eagle_block_drop",
                                      "enable_adaptive_verification")],
    *[(f, (0, 33, 0), None) for f in ("disable_lookahead_block_hashes", "draft_lm_head_quantization", "xpress_topc",
                                      "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k")],
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
                parts.append(f"removed between {version_text(window[0])[:4]} and {version_text(window[1])}" if window
                             else f"removed in {version_text(gone)}")
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


def default_gpu_memory_utilization(v: Version) -> float:
    return 0.92 if v >= (0, 20, 0) else 0.9
