"""specguard's own, version-aware checks of a speculative config. Pure.

They answer the question vLLM's ``SpeculativeConfig`` answers, for when that
vLLM cannot be imported here. Errors are what the given release refuses;
warnings are what it accepts but ignores or what specguard cannot confirm.
Every finding names the key, the version rule and the fix.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, Field

from specguard.preflight.findings import Finding
from specguard.vllm import knowledge as K

SUFFIX_FIELDS = ("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
                 "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", "n_predict")


class RuleContext(BaseModel):
    """What the rules know beyond the config: the release, the target deployment and local model configs."""

    version: K.Version
    tensor_parallel_size: int = 1
    target_max_model_len: int | None = None
    target_config: dict[str, Any] | None = Field(default=None, description="the target's config.json, when local")
    draft_config: dict[str, Any] | None = Field(default=None, description="the draft's config.json, when local")
    packages: dict[str, bool] = Field(default_factory=dict, description="optional packages known installed or not")


def resolve_method(cfg: dict[str, Any]) -> str | None:
    """The method vLLM would use: explicit, or detected from ``model`` as ``SpeculativeConfig.__post_init__`` does."""
    method = cfg.get("method")
    if method:
        return str(method)
    model = cfg.get("model")
    if not isinstance(model, str) or not model:
        return None
    if model in ("ngram", "[ngram]"):
        return "ngram"
    if "/" not in model and "." in model and not model.endswith((".json", ".gguf")):
        return "custom_class"
    name = model.lower()
    for marker, detected in (("eagle3", "eagle3"), ("eagle-", "eagle"), ("dflash", "dflash"), ("dspark", "dspark")):
        if marker in name:
            return detected
    return "draft_model"


def _int_value(value: Any) -> int | None:
    """pydantic's lax int: ints, integral floats and digit strings pass; bools and fractions do not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _err(key: str, message: str, rule: str, fix: str = "") -> Finding:
    return Finding(key=key, message=message, rule=rule, fix=fix)


def _warn(key: str, message: str, rule: str, fix: str = "") -> Finding:
    return Finding(key=key, message=message, rule=rule, fix=fix, severity="warning")


def _normalise_keys(cfg: dict[str, Any], v: K.Version, out: list[Finding]) -> dict[str, Any]:
    norm: dict[str, Any] = {}
    for key, value in cfg.items():
        if "-" in key and K.surface_for(v).hyphenated_keys:
            norm[key.replace("-", "_")] = value
        else:
            norm[key] = value
    return norm


def _check_keys(cfg: dict[str, Any], ctx: RuleContext, out: list[Finding]) -> None:
    v = ctx.version
    known = K.fields_for(v)
    policy = K.unknown_key_policy(v)
    vt = K.version_text(v)
    for key in cfg:
        if key in known:
            continue
        if key in K.INTERNAL_FIELDS:
            out.append(_err(key, f"'{key}' is injected by the engine and must not be passed", "internal engine field",
                            f"remove '{key}'"))
            continue
        if K.removal_uncertain(key, v):
            out.append(_warn(key, f"'{key}' was removed around {vt}; specguard cannot confirm this release has it",
                             f"'{key}' {K.field_history(key)}", f"remove '{key}'"))
            continue
        history = K.field_history(key)
        if "-" in key and key.replace("-", "_") in known:
            reason, fix = "hyphenated keys inside the JSON are accepted from 0.30.0", f"write '{key.replace('-', '_')}'"
        elif history:
            reason, fix = f"'{key}' {history}", f"remove '{key}'"
        else:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            reason = "not a speculative-config field"
            fix = f"did you mean '{close[0]}'?" if close else f"remove '{key}'"
        if policy == "ignore":
            out.append(_warn(key, f"unknown key '{key}' is silently ignored by vLLM {vt}",
                             f"0.9.2-0.15.x ignore unknown keys; {reason}", fix))
        else:
            kind = "pydantic extra=forbid (0.16+)" if policy == "reject" else "dataclass TypeError (0.8.3-0.9.1)"
            out.append(_err(key, f"unknown key '{key}' is rejected by vLLM {vt}", f"{kind}; {reason}", fix))


def _check_method(method: str | None, cfg: dict[str, Any], ctx: RuleContext, out: list[Finding]) -> str | None:
    v, vt = ctx.version, K.version_text(ctx.version)
    if method is None:
        if cfg.get("num_speculative_tokens") is not None:
            out.append(_err("model", "num_speculative_tokens was provided but without speculative model",
                            "a method or model is required", "set 'method' (for example \"ngram\") or 'model'"))
        return None
    accepted = K.methods_for(v)
    if method not in accepted:
        if K.method_unconfirmed(method, v):
            out.append(_warn("method", f"'{method}' is an MTP alias whose arrival before 0.32 specguard has not read",
                             "MTP aliases are checked from 0.32.0", "method \"mtp\" works from 0.11.0"))
            return method
        if method in K.REMOVED_METHODS and v >= K.REMOVED_METHODS[method][0]:
            gone, alternative = K.REMOVED_METHODS[method]
            out.append(_err("method", f"method '{method}' was removed in {K.version_text(gone)}",
                            f"'{method}' exists up to 0.32.x", alternative))
            return None
        if method.lower() == "pard":
            fix = "PARD is method \"draft_model\" with \"parallel_drafting\": true"
        else:
            close = difflib.get_close_matches(method.lower().replace("-", "_"), accepted, n=1, cutoff=0.75)
            fix = f"use '{close[0]}'" if close else "one of: " + ", ".join(m for m in accepted if not m.endswith("_mtp"))
        out.append(_err("method", f"method '{method}' is not accepted by vLLM {vt}", "methods by version (literal)", fix))
        return None
    if method == "draft_model" and K.draft_model_unsupported(v):
        out.append(_err("method", f"draft_model speculation is not supported by the V1 engine in {vt}",
                        "V1 raised NotImplementedError for draft_model from 0.10 to 0.14",
                        "upgrade to 0.15.0+ or use ngram, eagle or mtp"))
    if method == "suffix" and ctx.packages.get("arctic_inference") is False:
        out.append(_err("method", "suffix decoding needs Arctic Inference, which is not installed",
                        "suffix imports arctic_inference (0.12+)", "pip install arctic-inference"))
    elif method == "suffix" and "arctic_inference" not in ctx.packages:
        out.append(_warn("method", "suffix decoding needs the arctic-inference package; specguard cannot see the host",
                         "suffix imports arctic_inference (0.12+)", "check that arctic-inference is installed there"))
    return method


def _has_mtp_layers(config: dict[str, Any] | None) -> bool | None:
    if config is None:
        return None
    text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    return any(int(text.get(k) or 0) > 0 for k in MTP_LAYER_KEYS) or str(text.get("model_type", "")).endswith("_mtp")


def _check_model_and_k(method: str, cfg: dict[str, Any], ctx: RuleContext, out: list[Finding]) -> int | None:
    canon = K.canonical_method(method)
    model = cfg.get("model")
    raw_k = cfg.get("num_speculative_tokens")
    k = _int_value(raw_k) if raw_k is not None else None
    if raw_k is not None and k is None:
        out.append(_err("num_speculative_tokens", f"num_speculative_tokens must be an integer, got {raw_k!r}",
                        "int field (gt=0)", "a whole number such as 4"))
    elif k is not None and k <= 0:
        out.append(_err("num_speculative_tokens", f"num_speculative_tokens must be greater than 0, got {k}",
                        "int field (gt=0)", "a whole number such as 4"))
    needs_model = canon in {"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash", "custom_class"}
    if canon == "custom_class" and not model:
        out.append(_err("model", "method='custom_class' requires 'model' to contain the custom proposer module path",
                        "custom_class needs a dotted path", "\"model\": \"my_module.MyProposer\""))
    elif needs_model and not model:
        out.append(_err("model", f"method '{method}' needs a draft model and none was given",
                        "num_speculative_tokens was provided but without speculative model",
                        "set 'model' to the draft or head directory"))
    if canon == "mtp" and not model and _has_mtp_layers(ctx.target_config) is False:
        out.append(_err("method", "MTP uses the target's own MTP layers, and this target has none",
                        "Unsupported speculative method for a target without MTP layers",
                        "use a model with MTP heads (DeepSeek-V3, Qwen3-Next, ...) or another method"))
    n_predict = _int_value((ctx.draft_config or {}).get("n_predict")) or 0
    has_n_predict = n_predict > 0
    if has_n_predict and k is not None and k > n_predict and k % n_predict:
        out.append(_err("num_speculative_tokens", f"num_speculative_tokens:{k} must be divisible by n_predict={n_predict}",
                        "k above the draft's n_predict must be a multiple of it", f"use {n_predict} or a multiple"))
    if raw_k is None and canon not in {"suffix", "dspark"} and not has_n_predict and not (canon == "mtp" and not model):
        out.append(_err("num_speculative_tokens", f"num_speculative_tokens is required for method '{method}'",
                        "required unless the draft config has n_predict, or the method is suffix or dspark",
                        "add \"num_speculative_tokens\": 4 (n-gram) or 3 to 5 (draft model)"))
    return k


def _check_method_fields(method: str, cfg: dict[str, Any], ctx: RuleContext, out: list[Finding]) -> None:
    canon = K.canonical_method(method)
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        if key in cfg and canon not in {"ngram", "ngram_gpu"}:
            out.append(_warn(key, f"'{key}' is only used by ngram; method '{method}' ignores it",
                             "prompt_lookup_* are ngram/ngram_gpu fields", f"remove '{key}'"))
    for key in SUFFIX_FIELDS:
        if key in cfg and canon != "suffix":
            out.append(_warn(key, f"'{key}' is only used by suffix; method '{method}' ignores it",
                             "suffix_decoding_* are suffix fields", f"remove '{key}'"))
    if cfg.get("parallel_drafting") and canon not in K.EAGLE_LIKE | {"draft_model", "dspark"}:
        out.append(_warn("parallel_drafting", f"parallel_drafting applies to EAGLE and draft_model, not '{method}'",
                         "parallel drafting is P-EAGLE / PARD", "remove 'parallel_drafting'"))
    if cfg.get("index_share_for_mtp_iteration") and canon != "mtp":
        out.append(_err("index_share_for_mtp_iteration", "index_share_for_mtp_iteration is only supported with method='mtp'",
                        "mtp-only field (0.30+)", "remove it or use method mtp"))
    if cfg.get("draft_lm_head_quantization") and canon not in {"eagle", "eagle3", "mtp"}:
        out.append(_err("draft_lm_head_quantization", "draft_lm_head_quantization is only for eagle, eagle3 and mtp",
                        "0.33 field for EAGLE/MTP heads", "remove it"))
    if cfg.get("use_heterogeneous_vocab"):
        if canon != "draft_model":
            out.append(_err("use_heterogeneous_vocab", "use_heterogeneous_vocab only works with method='draft_model'",
                            "draft_model-only field (0.25+)", "remove it"))
        if cfg.get("use_local_argmax_reduction"):
            # 0.32 accepts the pair in the config and refuses it when the GPU speculator starts; 0.33 refuses the config.
            make = _err if ctx.version >= (0, 33, 0) else _warn
            out.append(make("use_heterogeneous_vocab", "use_heterogeneous_vocab is not compatible with "
                            "use_local_argmax_reduction (before 0.33 the GPU speculator refuses it at start-up)",
                            "heterogeneous vocab rule (0.25+)", "drop one of the two"))
        if cfg.get("draft_sample_method", "greedy") != "greedy":
            out.append(_err("draft_sample_method", "use_heterogeneous_vocab only supports greedy draft sampling",
                            "heterogeneous vocab rule (0.25+)", "\"draft_sample_method\": \"greedy\""))


def _check_ngram(cfg: dict[str, Any], out: list[Finding]) -> None:
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    values = {}
    for key, raw in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
        if raw is None:
            continue
        value = _int_value(raw)
        if value is None or value < 1:
            out.append(_err(key, f"{key} must be an integer >= 1, got {raw!r}", "int field (ge=1)", f"\"{key}\": 2"))
        else:
            values[key] = value
    lo_v = values.get("prompt_lookup_min", values.get("prompt_lookup_max", 5))
    hi_v = values.get("prompt_lookup_max", values.get("prompt_lookup_min", 5))
    if lo_v > hi_v:
        out.append(_err("prompt_lookup_min", f"prompt_lookup_min={lo_v} must be <= prompt_lookup_max={hi_v}",
                        "min <= max (unset ones copy the other; both unset means 5)", "swap them"))


def _check_draft(cfg: dict[str, Any], ctx: RuleContext, out: list[Finding]) -> None:
    v = ctx.version
    dtp = cfg.get("draft_tensor_parallel_size")
    if dtp is not None and _int_value(dtp) not in (1, ctx.tensor_parallel_size):
        out.append(_err("draft_tensor_parallel_size", f"draft_tensor_parallel_size={dtp} cannot be other value than 1 "
                        f"or target model tensor_parallel_size ({ctx.tensor_parallel_size})", "draft TP is 1 or target TP",
                        "\"draft_tensor_parallel_size\": 1"))
    if "tensor_parallel_size" in cfg:
        if K.tensor_parallel_trap(v):
            out.append(_err("tensor_parallel_size", "'tensor_parallel_size' is not a valid argument in the "
                            "speculative_config", "rejected from 0.15.0", "use 'draft_tensor_parallel_size'"))
        else:
            out.append(_warn("tensor_parallel_size", "the draft's tensor parallelism is 'draft_tensor_parallel_size'",
                             "0.15.0+ reject 'tensor_parallel_size'", "use 'draft_tensor_parallel_size'"))
    mml = cfg.get("max_model_len")
    if mml is not None:
        value = _int_value(mml)
        limits = [(n, lim) for n, lim in (("target", ctx.target_max_model_len),
                                          ("draft", (ctx.draft_config or {}).get("max_position_embeddings"))) if lim]
        if value is None or value < 1:
            out.append(_err("max_model_len", f"max_model_len must be an integer >= 1, got {mml!r}", "int field (ge=1)"))
        else:
            for name, limit in limits:
                if value > int(limit):
                    out.append(_err("max_model_len", f"speculative max_model_len={value} cannot be larger than the "
                                    f"{name}'s {limit}", "draft max_model_len <= draft and target max len",
                                    f"\"max_model_len\": {limit} or remove it"))
    target_vocab = (ctx.target_config or {}).get("vocab_size")
    draft_vocab = (ctx.draft_config or {}).get("vocab_size")
    if resolve_method(cfg) == "draft_model" and target_vocab and draft_vocab and target_vocab != draft_vocab \
            and not cfg.get("use_heterogeneous_vocab"):
        out.append(_err("model", f"target and draft vocabularies differ ({target_vocab} vs {draft_vocab})",
                        "draft_model needs the same vocabulary size",
                        "a same-family draft, or \"use_heterogeneous_vocab\": true (0.25+)"))


def _check_sampling(cfg: dict[str, Any], k: int | None, ctx: RuleContext, out: list[Finding]) -> None:
    method = cfg.get("rejection_sample_method", "standard")
    allowed = K.rejection_sample_methods(ctx.version)
    if "rejection_sample_method" in cfg and method not in allowed:
        out.append(_err("rejection_sample_method", f"rejection_sample_method '{method}' is not accepted by "
                        f"{K.version_text(ctx.version)}", "values by version", "one of: " + ", ".join(sorted(allowed))))
    if method == "fly" and method in allowed and k is not None:
        if k < 2:
            out.append(_err("num_speculative_tokens", "FLy rejection needs num_speculative_tokens >= 2",
                            "FLy rule (0.33)", "\"num_speculative_tokens\": 2 or more"))
        window = _int_value(cfg.get("fly_window_size")) if cfg.get("fly_window_size") is not None else None
        if window is not None and window >= k:
            out.append(_err("fly_window_size", f"fly_window_size={window} must be smaller than k={k}",
                            "FLy rule (0.33)", f"a window below {k}"))
    rates, length = cfg.get("synthetic_acceptance_rates"), cfg.get("synthetic_acceptance_length")
    if method != "synthetic":
        if rates is not None or length is not None:
            out.append(_err("synthetic_acceptance_rates" if rates is not None else "synthetic_acceptance_length",
                            "synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
                            "rejection_sample_method='synthetic'", "synthetic sampling rule", "remove them"))
        return
    if (rates is None) == (length is None):
        out.append(_err("rejection_sample_method", "rejection_sample_method='synthetic' requires exactly one of "
                        "synthetic_acceptance_rates or synthetic_acceptance_length", "synthetic sampling rule",
                        "give one of the two"))
    if rates is not None:
        if k is not None and len(rates) != k:
            out.append(_err("synthetic_acceptance_rates", f"synthetic_acceptance_rates must have length {k}",
                            "one rate per draft position", f"give {k} rates"))
        if any(not 0 <= r <= 1 for r in rates):
            out.append(_err("synthetic_acceptance_rates", "entries must be in [0, 1]", "synthetic sampling rule"))
        if any(b > a for a, b in zip(rates, rates[1:])):
            out.append(_err("synthetic_acceptance_rates", f"synthetic_acceptance_rates must be non-increasing, got {rates}",
                            "synthetic sampling rule", "sort them in decreasing order"))
    if length is not None and k is not None and not 1 <= float(length) <= k + 1:
        out.append(_err("synthetic_acceptance_length", f"synthetic_acceptance_length must be in [1, {k + 1}]",
                        "synthetic sampling rule", f"a value between 1 and {k + 1}"))


def check_config(cfg: Any, ctx: RuleContext) -> list[Finding]:
    """Findings for one speculative config against release ``ctx.version``; an error means vLLM refuses it."""
    out: list[Finding] = []
    vt = K.version_text(ctx.version)
    if not isinstance(cfg, dict):
        return [_err("speculative_config", f"the speculative config must be a JSON object, got {type(cfg).__name__}",
                     "--speculative-config takes a JSON object", "{\"method\": \"ngram\", \"num_speculative_tokens\": 4}")]
    if not K.surface_for(ctx.version).speculative_config:
        return [_err("speculative_config", f"vLLM {vt} has no --speculative-config (added in 0.8.2)",
                     "legacy flags only up to 0.8.1", "use the legacy flags: specguard preflight --config ... shows them")]
    if K.is_unread(ctx.version):
        out.append(Finding(key="version", severity="info", rule="versions 0.26-0.29 were not read",
                           message=f"specguard's tables for {vt} are interpolated between 0.25 and 0.30"))
    cfg = _normalise_keys(cfg, ctx.version, out)
    _check_keys(cfg, ctx, out)
    method = _check_method(resolve_method(cfg), cfg, ctx, out)
    if method is None:
        return out
    k = _check_model_and_k(method, cfg, ctx, out)
    _check_method_fields(method, cfg, ctx, out)
    if K.canonical_method(method) in {"ngram", "ngram_gpu"}:
        _check_ngram(cfg, out)
    _check_draft(cfg, ctx, out)
    _check_sampling(cfg, k, ctx, out)
    return out
