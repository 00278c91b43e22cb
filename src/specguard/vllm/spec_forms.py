"""Speculation configs written in the form a given vLLM release accepts: JSON, ``--spec-*`` flags, legacy flags. Pure.

The other direction of ``serve_command``: legacy flags become a ``--speculative-config`` object (keeping V0's
meaning where defaults changed), and a config becomes the ``--spec-*`` flags (0.22+) or the pre-0.8.3 flags.
"""

from __future__ import annotations

import json
from typing import Any

from specguard.vllm import knowledge as K
from specguard.vllm.findings import Finding
from specguard.vllm.methods import resolve_method

SPEC_CONFIG_FLAG = "--speculative-config"
# V0's default prompt_lookup_min was 1; V1 copies the other bound when one is unset, so a translation keeps V0's.
V0_PROMPT_LOOKUP_MIN = 1
NONE_TEXTS = ("", "None")  # vLLM's optional_type(...) reads both as None


def legacy_to_config(legacy: dict[str, Any]) -> tuple[dict[str, Any], list[Finding]]:
    """Legacy flags as a ``--speculative-config`` object, keeping V0's meaning where defaults changed."""
    cfg: dict[str, Any] = {}
    notes: list[Finding] = []
    for flag, value in legacy.items():
        cfg[K.LEGACY_FLAG_KEYS[flag]] = value
    if cfg.get("model") in ("[ngram]", "ngram"):
        cfg.pop("model")
        cfg = {"method": "ngram", **cfg}
        if "prompt_lookup_max" in cfg and "prompt_lookup_min" not in cfg:
            cfg["prompt_lookup_min"] = V0_PROMPT_LOOKUP_MIN
            notes.append(
                Finding(
                    key="prompt_lookup_min",
                    severity="info",
                    rule="V0 default 1; V1 copies the max",
                    message="added prompt_lookup_min=1: V0 defaulted it to 1, V1 would copy the max",
                )
            )
    elif cfg.get("model"):
        cfg = {"method": resolve_method(cfg), **cfg}
    return cfg, notes


def config_json(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, separators=(",", ":"))


def _spec_arg_text(flag: str, value: Any, version: K.Version) -> str | None:
    """``value`` as text the ``--spec-*`` option's argparse type reads back to the same setting, or None when it
    cannot (it then stays in the JSON, where pydantic sees it as written)."""
    if flag == "--spec-tokens":
        # type=int: a boolean is written as the integer pydantic's lax int reads it as (true -> 1), never "True".
        return str(int(value)) if isinstance(value, int) else None
    if not isinstance(value, str) or value in NONE_TEXTS or value.startswith("-"):
        return None  # '' and 'None' would read as unset; a leading '-' as an option or a dotted key
    if flag == "--spec-method" and value not in K.methods_for(version):
        return None  # not among the choices: argparse would refuse what the JSON path lets pydantic judge
    return value


def to_spec_args(cfg: dict[str, Any], version: K.Version) -> list[str] | None:
    """``--spec-method/--spec-model/--spec-tokens`` (0.22+), the other keys left in ``--speculative-config``.

    A value moves to its flag only where vLLM would read the flag back as the same setting; a key that another
    spelling ('num-speculative-tokens') also sets stays in the JSON, where vLLM resolves the two as before.
    """
    if not K.surface_for(version).spec_args:
        return None
    argv: list[str] = []
    rest = dict(cfg)
    for flag, key in K.SPEC_ARG_KEYS.items():
        if key not in rest or any(k != key and k.replace("-", "_") == key for k in rest):
            continue
        text = _spec_arg_text(flag, rest[key], version)
        if text is not None:
            argv += [flag, text]
            rest.pop(key)
    if rest or not argv:  # an empty object is a config too: vLLM refuses it, where no flag means speculation off
        argv += [SPEC_CONFIG_FLAG, config_json(rest)]
    return argv


def to_legacy_flags(cfg: dict[str, Any]) -> tuple[list[str], list[Finding]]:
    """The pre-0.8.3 flags for a config, for reading it next to an old runbook."""
    by_key = {key: flag for flag, key in K.LEGACY_FLAG_KEYS.items()}
    argv: list[str] = []
    missing: list[Finding] = []
    rest = dict(cfg)
    method = rest.pop("method", None)
    if method == "ngram":
        argv += ["--speculative-model", "[ngram]"]
    elif method not in (None, "draft_model"):
        missing.append(
            Finding(
                key="method",
                severity="info",
                rule="legacy flags predate this method",
                message=f"method '{method}' has no legacy flag form",
            )
        )
    for key, value in rest.items():
        flag = by_key.get(key)
        if flag is None:
            missing.append(Finding(key=key, severity="info", rule="no legacy flag", message=f"'{key}' has no legacy flag"))
        elif flag in K.LEGACY_BOOLEAN_FLAGS:
            argv += [flag] if value else []
        else:
            argv += [flag, str(value)]
    return argv, missing
