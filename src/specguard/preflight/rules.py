"""specguard's own, version-aware checks of a speculative config. Pure.

They answer the question vLLM's ``SpeculativeConfig`` answers, for when that
vLLM cannot be imported here. Errors are what the given release refuses;
warnings are what it accepts but ignores or what specguard cannot confirm.
Every finding names the key, the version rule and the fix.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel, Field

from specguard.preflight.k_schedule import FIELD as K_SCHEDULE_FIELD
from specguard.preflight.k_schedule import Band, check_schedule
from specguard.vllm import knowledge as K
from specguard.vllm.findings import Finding
from specguard.vllm.methods import detected_from_draft, resolve_method

SUFFIX_FIELDS = (
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
)
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", "n_predict")
# Methods whose ``__post_init__`` builds no draft ModelConfig (0.32): draft TP, the draft's max_model_len, its
# quantization and dspark_draft_topk are only checked on the model-based path.
NO_DRAFT_METHODS = {"ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states"}
_INT_TEXT = re.compile(r"[+-]?\d+(?:_\d+)*(?:\.0+)?", re.ASCII)
_INT64_LIMIT = 2**63
_BOOL_TEXT = {
    **dict.fromkeys(("1", "on", "t", "true", "y", "yes"), True),
    **dict.fromkeys(("0", "off", "f", "false", "n", "no"), False),
}
_EXPECTED = {
    "bool": "true or false",
    "int": "a whole number",
    "float": "a number",
    "str": "a string",
    "floats": "a list of numbers",
    "schedule": "a list of [start, end, k] triples",
    "load_config": "an object of LoadConfig fields",
}


class RuleContext(BaseModel):
    """What the rules know beyond the config: the release, the target deployment and local model configs."""

    version: K.Version
    tensor_parallel_size: int = 1
    target_max_model_len: int | None = None
    target_config: dict[str, Any] | None = Field(default=None, description="the target's config.json, when local")
    draft_config: dict[str, Any] | None = Field(default=None, description="the draft's config.json, when local")
    packages: dict[str, bool] = Field(default_factory=dict, description="optional packages known installed or not")


def _int_value(value: Any) -> int | None:
    """pydantic's lax int: ints, bools, integral floats below 2**63 and decimal strings ("+4", "1_000", "4.0")."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < _INT64_LIMIT else None
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        return int(value.strip().split(".")[0])
    return None


def _bool_value(value: Any) -> bool | None:
    """pydantic's lax bool: true/false, 0/1 and the strings yes/no, on/off, true/false, y/n, t/f, 1/0."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _BOOL_TEXT:
        return _BOOL_TEXT[value.lower()]
    return None


def _float_value(value: Any) -> float | None:
    """pydantic's lax float: numbers, bools and numeric strings ("2.5", "inf")."""
    if isinstance(value, (bool, int, float, str)):
        try:
            return float(value)
        except (ValueError, OverflowError):
            return None
    return None


def _coerce(kind: str, value: Any) -> tuple[bool, Any]:
    """(accepted, value as pydantic leaves it) for one field of kind ``K.FIELD_TYPES``."""
    base = kind.rstrip("?")
    if value is None:
        return kind.endswith("?"), None
    if base in ("bool", "int", "float"):
        coerced = {"bool": _bool_value, "int": _int_value, "float": _float_value}[base](value)
        return coerced is not None, coerced
    if base == "str":
        return isinstance(value, str), value
    if base == "floats":
        items = [_float_value(x) for x in value] if isinstance(value, (list, tuple)) else [None]
        return all(x is not None for x in items), items
    if base == "schedule":
        rows = (
            [[_int_value(x) for x in row] if isinstance(row, (list, tuple)) and len(row) == 3 else [None] for row in value]
            if isinstance(value, (list, tuple))
            else [[None]]
        )
        return all(x is not None for row in rows for x in row), [tuple(row) for row in rows]
    if base == "load_config":
        return isinstance(value, dict), value
    return True, value


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
            if K.internal_fields_overwritten(v):
                out.append(
                    _warn(
                        key,
                        f"'{key}' is injected by the engine; vLLM {vt} replaces what is passed",
                        "internal engine field (overwritten from 0.32)",
                        f"remove '{key}'",
                    )
                )
            else:
                out.append(
                    _err(
                        key,
                        f"'{key}' is injected by the engine and must not be passed",
                        "internal engine field",
                        f"remove '{key}'",
                    )
                )
            continue
        if K.removal_uncertain(key, v):
            out.append(
                _warn(
                    key,
                    f"'{key}' was removed around {vt}; specguard cannot confirm this release has it",
                    f"'{key}' {K.field_history(key)}",
                    f"remove '{key}'",
                )
            )
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
            out.append(
                _warn(
                    key,
                    f"unknown key '{key}' is silently ignored by vLLM {vt}",
                    f"0.9.2-0.15.x ignore unknown keys; {reason}",
                    fix,
                )
            )
        else:
            kind = "pydantic extra=forbid (0.16+)" if policy == "reject" else "dataclass TypeError (0.8.3-0.9.1)"
            out.append(_err(key, f"unknown key '{key}' is rejected by vLLM {vt}", f"{kind}; {reason}", fix))


def _check_types(cfg: dict[str, Any], ctx: RuleContext, out: list[Finding]) -> dict[str, Any]:
    """pydantic's field validation, which 0.32 runs before ``__post_init__``; the config as it leaves it.

    Values it refuses are left out of the returned config, so later rules do not judge them twice. ``method`` and
    ``num_speculative_tokens`` have rules of their own.
    """
    v = ctx.version
    if v < K.TYPED_FROM:
        return cfg
    vt = K.version_text(v)
    known = K.fields_for(v)
    view = dict(cfg)
    for key, raw in cfg.items():
        kind = K.FIELD_TYPES.get(key)
        if kind is None or key not in known or key in ("method", "num_speculative_tokens"):
            continue
        ok, value = _coerce(kind, raw)
        minimum = K.FIELD_MINIMUMS.get(key)
        if ok and minimum is not None and value is not None and value < minimum:
            ok = False
        if not ok:
            want = _EXPECTED[kind.rstrip("?")] + (f" >= {minimum}" if minimum else "")
            if raw is None:
                message, fix = f"{key} cannot be null", f"remove '{key}' to get its default"
            else:
                message, fix = f"{key} must be {want}, got {raw!r}", f"give {want}" + (" or null" * kind.endswith("?"))
            out.append(_err(key, message, f"pydantic validates '{key}' as {kind} in {vt}", fix))
            view.pop(key)
            continue
        values = (
            K.field_values(key, v) if key in ("kv_cache_dtype", "moe_backend", "attention_backend", "draft_load_config") else None
        )
        if values is not None and value is not None:
            if key == "draft_load_config":
                bad = sorted(set(value) - values)
            elif key == "attention_backend":
                bad = [] if value.lower() == "auto" or value.upper() in values else [value]
            else:
                bad = [] if value in values else [value]
            if bad:
                close = difflib.get_close_matches(str(bad[0]), sorted(values), n=1)
                what = (
                    f"unknown draft_load_config key(s) {', '.join(map(str, bad))}"
                    if key == "draft_load_config"
                    else f"{key}={value!r} is not accepted"
                )
                out.append(
                    _err(
                        key,
                        f"{what} by vLLM {vt}",
                        f"values of '{key}' in {vt}",
                        f"did you mean '{close[0]}'?" if close else f"remove '{key}'",
                    )
                )
                view.pop(key)
                continue
        view[key] = value
    return view


def _check_method(method: str | None, cfg: dict[str, Any], ctx: RuleContext, out: list[Finding]) -> str | None:
    v, vt = ctx.version, K.version_text(ctx.version)
    if method is None:
        # __post_init__ defaults the method to draft_model; without a model that needs k, and k needs a model.
        if cfg.get("num_speculative_tokens") is not None:
            out.append(
                _err(
                    "model",
                    "num_speculative_tokens was provided but without speculative model",
                    "a method or model is required",
                    "set 'method' (for example \"ngram\") or 'model'",
                )
            )
        else:
            out.append(
                _err(
                    "method",
                    "the speculative config names no method and no model: vLLM takes it for "
                    "draft_model without a draft and refuses it (num_speculative_tokens must be provided)",
                    "method defaults to draft_model, which needs 'model' and 'num_speculative_tokens'",
                    '{"method": "ngram", "num_speculative_tokens": 4}, or null for no speculation',
                )
            )
        return None
    accepted = K.methods_for(v)
    if method not in accepted:
        if K.method_unconfirmed(method, v):
            out.append(
                _warn(
                    "method",
                    f"'{method}' is an MTP alias whose arrival before 0.32 specguard has not read",
                    "MTP aliases are checked from 0.32.0",
                    'method "mtp" works from 0.11.0',
                )
            )
            return method
        if method in K.REMOVED_METHODS and v >= K.REMOVED_METHODS[method][0]:
            gone, alternative = K.REMOVED_METHODS[method]
            out.append(
                _err(
                    "method",
                    f"method '{method}' was removed in {K.version_text(gone)}",
                    f"'{method}' exists up to 0.32.x",
                    alternative,
                )
            )
            return None
        if method.lower() == "pard":
            fix = 'PARD is method "draft_model" with "parallel_drafting": true'
        else:
            close = difflib.get_close_matches(method.lower().replace("-", "_"), accepted, n=1, cutoff=0.75)
            fix = f"use '{close[0]}'" if close else "one of: " + ", ".join(m for m in accepted if not m.endswith("_mtp"))
        out.append(_err("method", f"method '{method}' is not accepted by vLLM {vt}", "methods by version (literal)", fix))
        return None
    if method == "draft_model" and K.draft_model_unsupported(v):
        out.append(
            _err(
                "method",
                f"draft_model speculation is not supported by the V1 engine in {vt}",
                "V1 raised NotImplementedError for draft_model from 0.10 to 0.14",
                "upgrade to 0.15.0+ or use ngram, eagle or mtp",
            )
        )
    if method == "suffix" and ctx.packages.get("arctic_inference") is False:
        out.append(
            _err(
                "method",
                "suffix decoding needs Arctic Inference, which is not installed",
                "suffix imports arctic_inference (0.12+)",
                "pip install arctic-inference",
            )
        )
    elif method == "suffix" and "arctic_inference" not in ctx.packages:
        out.append(
            _warn(
                "method",
                "suffix decoding needs the arctic-inference package; specguard cannot see the host",
                "suffix imports arctic_inference (0.12+)",
                "check that arctic-inference is installed there",
            )
        )
    return method


def _has_mtp_layers(config: dict[str, Any] | None) -> bool | None:
    if config is None:
        return None
    text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    model_type = str(text.get("model_type", ""))
    return any((_int_value(text.get(k)) or 0) > 0 for k in MTP_LAYER_KEYS) or model_type.endswith("_mtp")


def _draft_of(canon: str, cfg: dict[str, Any], ctx: RuleContext) -> tuple[bool, dict[str, Any] | None]:
    """Whether ``__post_init__`` builds a draft ModelConfig, and that draft's config.json when it is local.

    mtp and dspark without a model use the target itself, but only when num_speculative_tokens is given.
    """
    if canon in NO_DRAFT_METHODS:
        return False, None
    if cfg.get("model") is not None:
        return True, ctx.draft_config
    if canon in ("mtp", "dspark") and cfg.get("num_speculative_tokens") is not None:
        return True, ctx.target_config
    return False, None


def _check_model_and_k(method: str, cfg: dict[str, Any], ctx: RuleContext, out: list[Finding]) -> int | None:
    canon = K.canonical_method(method)
    model = cfg.get("model")
    raw_k = cfg.get("num_speculative_tokens")
    k = _int_value(raw_k) if raw_k is not None else None
    # From 0.32 the field is `int = Field(default=None, gt=0)`: an explicit null is validated, and refused.
    k_given = raw_k is not None or ("num_speculative_tokens" in cfg and ctx.version >= K.TYPED_FROM)
    if raw_k is None and k_given:
        out.append(
            _err(
                "num_speculative_tokens",
                "num_speculative_tokens cannot be null",
                "int field (gt=0) without '| None'",
                "remove it or give a whole number such as 4",
            )
        )
    elif raw_k is not None and k is None:
        out.append(
            _err(
                "num_speculative_tokens",
                f"num_speculative_tokens must be an integer, got {raw_k!r}",
                "int field (gt=0)",
                "a whole number such as 4",
            )
        )
    elif k is not None and k <= 0:
        out.append(
            _err(
                "num_speculative_tokens",
                f"num_speculative_tokens must be greater than 0, got {k}",
                "int field (gt=0)",
                "a whole number such as 4",
            )
        )
    elif isinstance(raw_k, bool):
        out.append(
            _warn(
                "num_speculative_tokens",
                f"num_speculative_tokens={raw_k} is read as {k}",
                "pydantic's lax int accepts booleans",
                f"write {k}",
            )
        )
    needs_model = canon in {"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash", "custom_class"}
    if canon == "custom_class" and not model:
        out.append(
            _err(
                "model",
                "method='custom_class' requires 'model' to contain the custom proposer module path",
                "custom_class needs a dotted path",
                '"model": "my_module.MyProposer"',
            )
        )
    elif needs_model and not model:
        out.append(
            _err(
                "model",
                f"method '{method}' needs a draft model and none was given",
                "num_speculative_tokens was provided but without speculative model",
                "set 'model' to the draft or head directory",
            )
        )
    if canon == "mtp" and not model and _has_mtp_layers(ctx.target_config) is False:
        out.append(
            _err(
                "method",
                "MTP uses the target's own MTP layers, and this target has none",
                "Unsupported speculative method for a target without MTP layers",
                "use a model with MTP heads (DeepSeek-V3, Qwen3-Next, ...) or another method",
            )
        )
    loads, draft = _draft_of(canon, cfg, ctx)
    if loads and model in ("ngram", "[ngram]"):
        out.append(
            _err(
                "model",
                f"model '{model}' names the n-gram method; with method '{method}' vLLM tries to "
                f"load a draft model called '{model}'",
                "'ngram' is a model only when the method is ngram",
                "\"method\": \"ngram\" without 'model', or the draft's directory as 'model'",
            )
        )
    elif (
        loads
        and isinstance(model, str)
        and canon in ("mtp", "mlp_speculator")
        and draft is not None
        and detected_from_draft(model, draft) is None
        and not _has_mtp_layers(draft)
    ):
        out.append(
            _err(
                "method",
                f"method '{method}' needs a {canon} checkpoint, and the draft's config.json "
                f"(model_type '{draft.get('model_type')}') is not one",
                "Unsupported speculative method: an explicit mtp/mlp_speculator method is checked against the draft's model_type",
                '"method": "draft_model" for an ordinary draft model',
            )
        )
    n_predict = _int_value((draft or {}).get("n_predict")) or 0 if loads else 0
    if canon == "mtp" and loads and not n_predict:
        n_predict = max((_int_value((draft or {}).get(key)) or 0) for key in MTP_LAYER_KEYS)
    if canon != "dspark" and n_predict > 0 and k is not None and k > n_predict and k % n_predict:
        out.append(
            _err(
                "num_speculative_tokens",
                f"num_speculative_tokens:{k} must be divisible by n_predict={n_predict}",
                "k above the draft's n_predict must be a multiple of it",
                f"use {n_predict} or a multiple",
            )
        )
    if k_given or canon == "suffix":
        return k
    if canon == "dspark" and loads:
        if draft is not None and not any(draft.get(key) for key in ("block_size", "dspark_block_size")):
            out.append(
                _err(
                    "num_speculative_tokens",
                    "num_speculative_tokens is required for method 'dspark' when the draft config has no block_size",
                    "dspark defaults k to the draft's block_size",
                    'add "num_speculative_tokens" (the draft\'s trained block size)',
                )
            )
    elif not (n_predict > 0 and canon != "dspark"):
        out.append(
            _err(
                "num_speculative_tokens",
                f"num_speculative_tokens is required for method '{method}'",
                "required unless the draft config has n_predict (block_size for dspark), or the method is suffix",
                'add "num_speculative_tokens": 4 (n-gram) or 3 to 5 (draft model)',
            )
        )
    return k


def _check_method_fields(method: str, cfg: dict[str, Any], ctx: RuleContext, loads: bool, out: list[Finding]) -> None:
    canon = K.canonical_method(method)
    v = ctx.version
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        if key in cfg and canon not in {"ngram", "ngram_gpu"}:
            out.append(
                _warn(
                    key,
                    f"'{key}' is only used by ngram; method '{method}' ignores it",
                    "prompt_lookup_* are ngram/ngram_gpu fields",
                    f"remove '{key}'",
                )
            )
    for key in SUFFIX_FIELDS:
        if key in cfg and canon != "suffix":
            out.append(
                _warn(
                    key,
                    f"'{key}' is only used by suffix; method '{method}' ignores it",
                    "suffix_decoding_* are suffix fields",
                    f"remove '{key}'",
                )
            )
    if canon == "suffix":
        _check_suffix(cfg, out)
    if cfg.get("parallel_drafting") and canon not in K.EAGLE_LIKE | {"draft_model", "dspark"}:
        out.append(
            _warn(
                "parallel_drafting",
                f"parallel_drafting applies to EAGLE and draft_model, not '{method}'",
                "parallel drafting is P-EAGLE / PARD",
                "remove 'parallel_drafting'",
            )
        )
    # `if self.index_share_for_mtp_iteration is not None` (0.32): false counts as set.
    if cfg.get("index_share_for_mtp_iteration") is not None and canon != "mtp":
        out.append(
            _err(
                "index_share_for_mtp_iteration",
                "index_share_for_mtp_iteration is only supported with method='mtp'",
                "mtp-only field (0.30+)",
                "remove it or use method mtp",
            )
        )
    if cfg.get("dspark_draft_topk") is not None and canon != "dspark" and loads:
        out.append(
            _err(
                "dspark_draft_topk",
                "dspark_draft_topk is only supported by DSpark",
                "checked on the model-based path (0.25+)",
                "remove 'dspark_draft_topk'",
            )
        )
    adaptive = _bool_value(cfg.get("enable_adaptive_verification", False))
    if adaptive and _bool_value(cfg.get("use_local_argmax_reduction", False)) and canon != "dspark":
        out.append(
            _err(
                "enable_adaptive_verification",
                "adaptive verification needs the draft logits, which use_local_argmax_reduction never materializes",
                "adaptive verification rule (0.32)",
                "disable one of them",
            )
        )
    if K.needs_v2_model_runner(v) and (canon == "dspark" or adaptive):
        what = "dspark speculative decoding" if canon == "dspark" else "adaptive draft verification"
        out.append(
            _warn(
                "method" if canon == "dspark" else "enable_adaptive_verification",
                f"{what} runs only on Model Runner V2; vLLM {K.version_text(v)} refuses it where the V1 runner "
                "is used (no Triton, or VLLM_USE_V2_MODEL_RUNNER=0)",
                "Model Runner V1 does not support it",
                "check that the host runs Model Runner V2",
            )
        )
    lm_head = cfg.get("draft_lm_head_quantization")
    lm_head_values = K.field_values("draft_lm_head_quantization", v)
    if lm_head is not None and lm_head_values is not None and (not isinstance(lm_head, str) or lm_head not in lm_head_values):
        out.append(
            _err(
                "draft_lm_head_quantization",
                f"draft_lm_head_quantization={lm_head!r} is not accepted",
                'literal "fp8" | "nvfp4" (0.33)',
                '"fp8" or "nvfp4"',
            )
        )
    elif lm_head and canon not in {"eagle", "eagle3", "mtp"}:
        out.append(
            _err(
                "draft_lm_head_quantization",
                "draft_lm_head_quantization is only for eagle, eagle3 and mtp",
                "0.33 field for EAGLE/MTP heads",
                "remove it",
            )
        )
    if cfg.get("use_heterogeneous_vocab"):
        if canon != "draft_model":
            out.append(
                _err(
                    "use_heterogeneous_vocab",
                    "use_heterogeneous_vocab only works with method='draft_model'",
                    "draft_model-only field (0.25+)",
                    "remove it",
                )
            )
        if cfg.get("use_local_argmax_reduction"):
            # 0.32 accepts the pair in the config and refuses it when the GPU speculator starts; 0.33 refuses the config.
            make = _err if ctx.version >= (0, 33, 0) else _warn
            out.append(
                make(
                    "use_heterogeneous_vocab",
                    "use_heterogeneous_vocab is not compatible with "
                    "use_local_argmax_reduction (before 0.33 the GPU speculator refuses it at start-up)",
                    "heterogeneous vocab rule (0.25+)",
                    "drop one of the two",
                )
            )
        if cfg.get("draft_sample_method", "greedy") != "greedy":
            out.append(
                _err(
                    "draft_sample_method",
                    "use_heterogeneous_vocab only supports greedy draft sampling",
                    "heterogeneous vocab rule (0.25+)",
                    '"draft_sample_method": "greedy"',
                )
            )


def _check_suffix(cfg: dict[str, Any], out: list[Finding]) -> None:
    """``_validate_suffix_decoding`` (0.12+), after the Arctic Inference import."""
    limits = {
        "suffix_decoding_max_tree_depth": (1, None),
        "suffix_decoding_max_cached_requests": (0, None),
        "suffix_decoding_max_spec_factor": (0, None),
        "suffix_decoding_min_token_prob": (0, 1),
    }
    for key, (low, high) in limits.items():
        if key not in cfg:
            continue
        value = _float_value(cfg[key])
        if value is None or not (low <= value and (high is None or value <= high)):  # NaN fails, as in vLLM
            bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
            out.append(_err(key, f"{key}={cfg[key]!r} must be {bounds}", "suffix decoding ranges", f"a value {bounds}"))


def _check_ngram(cfg: dict[str, Any], out: list[Finding]) -> None:
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    values = {}
    for key, raw in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
        if raw is None:
            continue
        value = _int_value(raw)
        if value is None or value < 1:
            out.append(_err(key, f"{key} must be an integer >= 1, got {raw!r}", "int field (ge=1)", f'"{key}": 2'))
        else:
            values[key] = value
    lo_v = values.get("prompt_lookup_min", values.get("prompt_lookup_max", 5))
    hi_v = values.get("prompt_lookup_max", values.get("prompt_lookup_min", 5))
    if lo_v > hi_v:
        out.append(
            _err(
                "prompt_lookup_min",
                f"prompt_lookup_min={lo_v} must be <= prompt_lookup_max={hi_v}",
                "min <= max (unset ones copy the other; both unset means 5)",
                "swap them",
            )
        )


def _check_draft(
    method: str, cfg: dict[str, Any], ctx: RuleContext, loads: bool, draft: dict[str, Any] | None, out: list[Finding]
) -> None:
    """Draft TP, max_model_len, quantization and vocabulary: only looked at where a draft ModelConfig is built."""
    v = ctx.version
    dtp = cfg.get("draft_tensor_parallel_size")
    if loads and dtp is not None and _int_value(dtp) not in (1, ctx.tensor_parallel_size):
        out.append(
            _err(
                "draft_tensor_parallel_size",
                f"draft_tensor_parallel_size={dtp} cannot be other value than 1 "
                f"or target model tensor_parallel_size ({ctx.tensor_parallel_size})",
                "draft TP is 1 or target TP",
                '"draft_tensor_parallel_size": 1',
            )
        )
    # `if self.tensor_parallel_size is not None` in _verify_args: an explicit null passes.
    if cfg.get("tensor_parallel_size") is not None:
        if K.tensor_parallel_trap(v):
            out.append(
                _err(
                    "tensor_parallel_size",
                    "'tensor_parallel_size' is not a valid argument in the speculative_config",
                    "rejected from 0.15.0",
                    "use 'draft_tensor_parallel_size'",
                )
            )
        else:
            out.append(
                _warn(
                    "tensor_parallel_size",
                    "the draft's tensor parallelism is 'draft_tensor_parallel_size'",
                    "0.15.0+ reject 'tensor_parallel_size'",
                    "use 'draft_tensor_parallel_size'",
                )
            )
    mml = cfg.get("max_model_len")
    if mml is not None:
        value = _int_value(mml)
        limits = [
            (n, lim)
            for n, lim in (
                ("target", ctx.target_max_model_len),
                ("draft", _int_value((draft or {}).get("max_position_embeddings"))),
            )
            if lim
        ]
        if value is None or value < 1:
            out.append(_err("max_model_len", f"max_model_len must be an integer >= 1, got {mml!r}", "int field (ge=1)"))
        elif loads:
            for name, limit in limits:
                if value > int(limit):
                    out.append(
                        _err(
                            "max_model_len",
                            f"speculative max_model_len={value} cannot be larger than the {name}'s {limit}",
                            "draft max_model_len <= draft and target max len",
                            f'"max_model_len": {limit} or remove it',
                        )
                    )
    quantization = cfg.get("quantization")
    known_quantization = K.field_values("quantization", v)
    # ModelConfig lowercases it (validate_quantization_before) before looking it up.
    if (
        loads
        and isinstance(quantization, str)
        and known_quantization is not None
        and quantization.lower() not in known_quantization
    ):
        close = difflib.get_close_matches(quantization, sorted(known_quantization), n=1)
        out.append(
            _err(
                "quantization",
                f"Unknown quantization method: {quantization} (the draft's ModelConfig refuses it in {K.version_text(v)})",
                "quantization methods of the release",
                f"use '{close[0]}'" if close else "remove 'quantization'",
            )
        )
    target_vocab = (ctx.target_config or {}).get("vocab_size")
    draft_vocab = (ctx.draft_config or {}).get("vocab_size")
    if (
        K.canonical_method(method) == "draft_model"
        and target_vocab
        and draft_vocab
        and target_vocab != draft_vocab
        and not cfg.get("use_heterogeneous_vocab")
    ):
        out.append(
            _err(
                "model",
                f"target and draft vocabularies differ ({target_vocab} vs {draft_vocab})",
                "draft_model needs the same vocabulary size",
                'a same-family draft, or "use_heterogeneous_vocab": true (0.25+)',
            )
        )


def _check_sampling(cfg: dict[str, Any], k: int | None, ctx: RuleContext, out: list[Finding]) -> None:
    method = cfg.get("rejection_sample_method", "standard")
    allowed = K.rejection_sample_methods(ctx.version)
    if "rejection_sample_method" in cfg and (not isinstance(method, str) or method not in allowed):
        out.append(
            _err(
                "rejection_sample_method",
                f"rejection_sample_method {method!r} is not accepted by {K.version_text(ctx.version)}",
                "values by version",
                "one of: " + ", ".join(sorted(allowed)),
            )
        )
    draft_sampling = cfg.get("draft_sample_method")
    draft_values = K.field_values("draft_sample_method", ctx.version)
    if (
        "draft_sample_method" in cfg
        and draft_values is not None
        and (not isinstance(draft_sampling, str) or draft_sampling not in draft_values)
    ):
        out.append(
            _err(
                "draft_sample_method",
                f"draft_sample_method {draft_sampling!r} is not accepted",
                "literal 'greedy' | 'probabilistic' (0.25+)",
                '"greedy" or "probabilistic"',
            )
        )
    if method == "fly" and method in allowed and k is not None:
        if k < 2:
            out.append(
                _err(
                    "num_speculative_tokens",
                    "FLy rejection needs num_speculative_tokens >= 2",
                    "FLy rule (0.33)",
                    '"num_speculative_tokens": 2 or more',
                )
            )
        window = _int_value(cfg.get("fly_window_size")) if cfg.get("fly_window_size") is not None else None
        if window is not None and window >= k:
            out.append(
                _err(
                    "fly_window_size",
                    f"fly_window_size={window} must be smaller than k={k}",
                    "FLy rule (0.33)",
                    f"a window below {k}",
                )
            )
    rates, length = cfg.get("synthetic_acceptance_rates"), cfg.get("synthetic_acceptance_length")
    if method != "synthetic":
        if rates is not None or length is not None:
            out.append(
                _err(
                    "synthetic_acceptance_rates" if rates is not None else "synthetic_acceptance_length",
                    "synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
                    "rejection_sample_method='synthetic'",
                    "synthetic sampling rule",
                    "remove them",
                )
            )
        return
    if (rates is None) == (length is None):
        out.append(
            _err(
                "rejection_sample_method",
                "rejection_sample_method='synthetic' requires exactly one of "
                "synthetic_acceptance_rates or synthetic_acceptance_length",
                "synthetic sampling rule",
                "give one of the two",
            )
        )
    if rates is not None:
        parsed = [_float_value(r) for r in rates] if isinstance(rates, (list, tuple)) else [None]
        numbers = [r for r in parsed if r is not None]
        if len(numbers) != len(parsed):
            out.append(
                _err(
                    "synthetic_acceptance_rates",
                    f"synthetic_acceptance_rates must be a list of numbers, got {rates!r}",
                    "list[float] field",
                    "[0.9, 0.8, 0.7, 0.6]",
                )
            )
            numbers = []
        elif k is not None and len(numbers) != k:
            out.append(
                _err(
                    "synthetic_acceptance_rates",
                    f"synthetic_acceptance_rates must have length {k}",
                    "one rate per draft position",
                    f"give {k} rates",
                )
            )
        if any(not 0 <= r <= 1 for r in numbers):
            out.append(_err("synthetic_acceptance_rates", "entries must be in [0, 1]", "synthetic sampling rule"))
        if any(b > a for a, b in zip(numbers, numbers[1:])):
            out.append(
                _err(
                    "synthetic_acceptance_rates",
                    f"synthetic_acceptance_rates must be non-increasing, got {rates}",
                    "synthetic sampling rule",
                    "sort them in decreasing order",
                )
            )
    if length is not None:
        value = _float_value(length)
        if value is None:
            out.append(
                _err(
                    "synthetic_acceptance_length",
                    f"synthetic_acceptance_length must be a number, got {length!r}",
                    "float field",
                    "a value such as 2.5",
                )
            )
        elif k is not None and not 1 <= value <= k + 1:
            out.append(
                _err(
                    "synthetic_acceptance_length",
                    f"synthetic_acceptance_length must be in [1, {k + 1}]",
                    "synthetic sampling rule",
                    f"a value between 1 and {k + 1}",
                )
            )


def check_config(cfg: Any, ctx: RuleContext) -> list[Finding]:
    """Findings for one speculative config against release ``ctx.version``; an error means vLLM refuses it."""
    out: list[Finding] = []
    vt = K.version_text(ctx.version)
    if cfg is None:
        # create_speculative_config: `if self.speculative_config is None: return None`.
        return [
            _warn(
                "speculative_config",
                "the speculative config is null: vLLM runs without speculative decoding",
                "speculative_config=None turns speculation off",
                '{"method": "ngram", "num_speculative_tokens": 4} to turn it on',
            )
        ]
    if not isinstance(cfg, dict):
        return [
            _err(
                "speculative_config",
                f"the speculative config must be a JSON object, got {type(cfg).__name__}",
                "--speculative-config takes a JSON object",
                '{"method": "ngram", "num_speculative_tokens": 4}',
            )
        ]
    if not K.surface_for(ctx.version).speculative_config:
        return [
            _err(
                "speculative_config",
                f"vLLM {vt} has no --speculative-config (added in 0.8.2)",
                "legacy flags only up to 0.8.1",
                "use the legacy flags: specguard preflight --config ... shows them",
            )
        ]
    if K.is_unread(ctx.version):
        out.append(
            Finding(
                key="version",
                severity="info",
                rule="versions 0.26-0.29 were not read",
                message=f"specguard's tables for {vt} are interpolated between 0.25 and 0.30",
            )
        )
    cfg = _normalise_keys(cfg, ctx.version, out)
    _check_keys(cfg, ctx, out)
    cfg = _check_types(cfg, ctx, out)
    method = _check_method(resolve_method(cfg, ctx.draft_config), cfg, ctx, out)
    if method is None:
        return out
    k = _check_model_and_k(method, cfg, ctx, out)
    loads, draft = _draft_of(K.canonical_method(method), cfg, ctx)
    _check_method_fields(method, cfg, ctx, loads, out)
    if K.canonical_method(method) in {"ngram", "ngram_gpu"}:
        _check_ngram(cfg, out)
    _check_draft(method, cfg, ctx, loads, draft, out)
    _check_sampling(cfg, k, ctx, out)
    if K_SCHEDULE_FIELD in K.fields_for(ctx.version):
        out.extend(check_schedule(cfg.get(K_SCHEDULE_FIELD), k, method, ctx.version))
    return out


def schedule_findings(
    schedule: list[Band],
    num_speculative_tokens: int,
    method: str,
    version_text: str,
    model: str | None = None,
) -> list[Finding]:
    """Every finding ``check_config`` gives the config that runs ``schedule`` (k by batch size), for the simulator.

    Draft-based methods (eagle, eagle3, dflash, draft_model) need ``model``; without it that is a finding too.
    """
    cfg: dict[str, Any] = {
        "method": method,
        "num_speculative_tokens": num_speculative_tokens,
        K_SCHEDULE_FIELD: [list(band) for band in schedule],
    }
    if model is not None:
        cfg["model"] = model
    return check_config(cfg, RuleContext(version=K.parse_version(version_text)))
