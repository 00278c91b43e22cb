"""Which speculation method vLLM uses for a config: explicit, or detected from the draft's name and config. Pure.

``SpeculativeConfig.__post_init__`` (0.32) does this detection; preflight's rules and the legacy-flag
translation both need its answer.
"""

from __future__ import annotations

from typing import Any

from specguard.vllm import knowledge as K

# Target model types that ``hf_config_override`` rewrites to deepseek_mtp (0.32).
MTP_TARGET_TYPES = ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")


def is_custom_class_path(model: str) -> bool:
    """vLLM's ``SpeculativeConfig._is_custom_proposer_path`` (0.32): dotted identifiers, no URL and no '/'."""
    if model.startswith(("http://", "https://", "file://")) or "/" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def detected_from_draft(model: str, draft_config: dict[str, Any] | None) -> str | None:
    """The method ``__post_init__`` switches a draft to: from its name first, then from its config.json."""
    name = model.lower()
    for marker, detected in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")):
        if marker in name:
            return detected
    if not draft_config:
        return None
    architectures = draft_config.get("architectures") or []
    model_type = str(draft_config.get("model_type", ""))
    if "MuseGlimmerAssistantModel" in architectures:
        return "dflash"
    if any(a in architectures for a in ("Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel")):
        return "dspark"
    if model_type in ("medusa", "mlp_speculator"):
        return model_type
    if model_type in K.MTP_ALIASES_0_32 or model_type in MTP_TARGET_TYPES:
        return "mtp"
    return None


def resolve_method(cfg: dict[str, Any], draft_config: dict[str, Any] | None = None) -> str | None:
    """The method vLLM would use: explicit, or detected from ``model`` as ``SpeculativeConfig.__post_init__`` does.

    None when the config names neither: vLLM then defaults to draft_model without a draft (see ``_check_method``).
    """
    method = cfg.get("method")
    if method is not None:
        return str(method)
    model = cfg.get("model")
    if not isinstance(model, str) or not model:
        return None
    if is_custom_class_path(model):
        return "custom_class"
    if model in ("ngram", "[ngram]"):
        return "ngram"
    return detected_from_draft(model, draft_config) or "draft_model"
