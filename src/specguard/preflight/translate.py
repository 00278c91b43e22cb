"""Command lines and the three speculation surfaces: legacy flags, ``--speculative-config`` and ``--spec-*``. Pure.

Reads a ``vllm serve ...`` line (or a systemd ``ExecStart=``), pulls every
speculation setting out of it the way vLLM's FlexibleArgumentParser would
(underscores in flag names, dotted keys, ``-sc``, unique prefixes), and
writes a config back in the form a given release accepts.
"""

from __future__ import annotations

import ast
import json
import shlex
from typing import Any

from pydantic import BaseModel, Field

from specguard.errors import UsageError
from specguard.preflight.findings import Finding
from specguard.preflight.rules import resolve_method
from specguard.vllm import knowledge as K

SPEC_CONFIG_FLAG = "--speculative-config"
SERVER_MODULES = ("vllm.entrypoints.openai.api_server",)
# V0's default prompt_lookup_min was 1; V1 copies the other bound when one is unset, so a translation keeps V0's.
V0_PROMPT_LOOKUP_MIN = 1


class CommandError(UsageError):
    pass


class Speculation(BaseModel):
    """Speculation settings found in a command line, merged as vLLM merges them."""

    config: dict[str, Any] | None = None
    forms: list[str] = Field(default_factory=list, description="legacy_flags, speculative_config, dotted_keys, spec_args")
    findings: list[Finding] = Field(default_factory=list)
    legacy: dict[str, Any] = Field(default_factory=dict, description="legacy flag -> value, as written")


def split_command(text: str) -> list[str]:
    """argv of a shell line or a systemd ExecStart= (with its prefixes and backslash continuations)."""
    lines = [ln.rstrip() for ln in text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines()]
    starts = [ln.strip() for ln in lines if ln.strip().startswith("ExecStart=")]
    line = starts[-1][len("ExecStart="):] if starts else " ".join(ln for ln in lines if not ln.strip().startswith("#"))
    line = line.lstrip("-@:+!")
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise CommandError(f"cannot split the command line: {exc}") from exc


def server_args(argv: list[str]) -> list[str]:
    """The arguments vLLM's server parser sees: after ``vllm serve`` (model positional kept) or the API module."""
    for i, tok in enumerate(argv):
        if tok == "serve" and i > 0 and argv[i - 1].split("/")[-1] == "vllm":
            return argv[i + 1:]
        if tok == "-m" and i + 1 < len(argv) and argv[i + 1] in SERVER_MODULES:
            return argv[i + 2:]
    raise CommandError("no vLLM server invocation found: expected 'vllm serve MODEL ...' or "
                       "'python -m vllm.entrypoints.openai.api_server ...'")


def option_value(args: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``args`` (``--flag value`` or ``--flag=value``, underscores allowed)."""
    for i, tok in enumerate(args):
        flag, _, inline = tok.partition("=")
        if flag.replace("_", "-") in names:
            return inline or (args[i + 1] if i + 1 < len(args) else None)
    return None


def model_argument(args: list[str]) -> str | None:
    """``vllm serve MODEL`` puts it first; the API-server module takes ``--model``."""
    return args[0] if args and not args[0].startswith("-") else option_value(args, "--model")


def _parse_value(text: str, flag: str, out: list[Finding]) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        out.append(Finding(key=flag, message=f"{flag} value is not JSON: {text[:200]}", rule="--speculative-config is JSON",
                           fix="quote it for the shell: --speculative-config '{\"method\": \"ngram\", ...}'"))
        return None


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _flag_name(tok: str) -> tuple[str, str | None]:
    """FlexibleArgumentParser spelling: underscores in a flag's name (not in a dotted key) become dashes."""
    name, eq, value = tok.partition("=")
    if name.startswith("--"):
        head, dot, tail = name[2:].partition(".")
        name = "--" + head.replace("_", "-") + dot + tail
    return name, (value if eq else None)


def extract_speculation(args: list[str], version: K.Version) -> Speculation:
    """Every speculation setting in ``args``, with findings for forms this release does not accept."""
    findings: list[Finding] = []
    legacy: dict[str, Any] = {}
    json_cfg: dict[str, Any] = {}
    dotted: dict[str, Any] = {}
    spec_args: dict[str, Any] = {}
    forms: list[str] = []
    i = 0
    while i < len(args):
        name, inline = _flag_name(args[i])
        takes_value = name not in K.LEGACY_BOOLEAN_FLAGS
        value = inline if inline is not None else (args[i + 1] if takes_value and i + 1 < len(args) else None)
        step = 1 if inline is not None or not takes_value else 2
        if name in K.LEGACY_FLAG_KEYS:
            legacy[name] = True if not takes_value else _scalar(value or "")
        elif name.startswith(SPEC_CONFIG_FLAG + "."):
            dotted[name.split(".", 1)[1].replace("-", "_")] = _scalar(value or "")
        elif name == "-sc" or (name.startswith("--speculative") and SPEC_CONFIG_FLAG.startswith(name)):
            if name not in (SPEC_CONFIG_FLAG, "-sc"):
                findings.append(Finding(key=name, severity="warning", message=f"'{name}' is an abbreviation argparse "
                                        f"resolves to {SPEC_CONFIG_FLAG}", rule="argparse allow_abbrev",
                                        fix=f"spell out {SPEC_CONFIG_FLAG}"))
            if name == "-sc":
                forms.append("short_alias")
            parsed = _parse_value(value or "", name, findings)
            if isinstance(parsed, dict):
                json_cfg.update(parsed)
            elif parsed is not None:
                findings.append(Finding(key=name, message=f"{name} must be a JSON object", rule="JSON object"))
        elif name in K.SPEC_ARG_KEYS:
            spec_args[name] = _scalar(value or "")
        else:
            step = 1
        i += step
    findings += _surface_findings(version, legacy, json_cfg, dotted, spec_args, forms)
    config = _merge(legacy, json_cfg, dotted, spec_args, version, findings)
    forms = [f for f, present in (("legacy_flags", legacy), ("speculative_config", json_cfg), ("dotted_keys", dotted),
                                  ("spec_args", spec_args)) if present] + forms
    return Speculation(config=config, forms=forms, findings=findings, legacy=legacy)


def _surface_findings(v: K.Version, legacy: dict[str, Any], json_cfg: dict[str, Any], dotted: dict[str, Any],
                      spec_args: dict[str, Any], forms: list[str]) -> list[Finding]:
    surface, vt = K.surface_for(v), K.version_text(v)
    out: list[Finding] = []
    if legacy and not surface.legacy_flags:
        fix = f"{SPEC_CONFIG_FLAG} '{config_json(legacy_to_config(legacy)[0])}'"
        for flag in legacy:
            out.append(Finding(key=flag, message=f"{flag} was removed in 0.8.3; vLLM {vt} fails with 'unrecognized "
                               "arguments'", rule="legacy speculation flags exist up to 0.8.2", fix=fix))
    elif legacy and v == (0, 8, 2):
        out.append(Finding(key=next(iter(legacy)), severity="warning", rule="deprecated in 0.8.2, removed in 0.8.3",
                           message="legacy speculation flags still work in 0.8.2 but are deprecated",
                           fix=f"{SPEC_CONFIG_FLAG} '{config_json(legacy_to_config(legacy)[0])}'"))
    if (json_cfg or dotted) and not surface.speculative_config:
        out.append(Finding(key=SPEC_CONFIG_FLAG, message=f"vLLM {vt} has no {SPEC_CONFIG_FLAG} (added in 0.8.2)",
                           rule="--speculative-config from 0.8.2", fix="use the legacy flags (see translations)"))
    if dotted and not surface.dotted_keys:
        out.append(Finding(key=SPEC_CONFIG_FLAG + ".*", message=f"dotted keys need 0.9.0+, this is {vt}",
                           rule="FlexibleArgumentParser dotted keys from 0.9.0", fix="pass one JSON object"))
    if "short_alias" in forms and not surface.short_alias:
        out.append(Finding(key="-sc", message=f"-sc needs 0.19.0+, this is {vt}", rule="-sc alias from 0.19.0",
                           fix=f"write {SPEC_CONFIG_FLAG}"))
    if spec_args and not surface.spec_args:
        for flag in spec_args:
            out.append(Finding(key=flag, message=f"{flag} needs 0.22.0+; vLLM {vt} fails with 'unrecognized arguments'",
                               rule="--spec-method/--spec-model/--spec-tokens from 0.22.0",
                               fix=f"put '{K.SPEC_ARG_KEYS[flag]}' inside {SPEC_CONFIG_FLAG}"))
    return out


def _merge(legacy: dict[str, Any], json_cfg: dict[str, Any], dotted: dict[str, Any], spec_args: dict[str, Any],
           v: K.Version, findings: list[Finding]) -> dict[str, Any] | None:
    if not (legacy or json_cfg or dotted or spec_args):
        return None
    merged: dict[str, Any] = {}
    if legacy:
        merged.update(legacy_to_config(legacy)[0])
    merged.update(json_cfg)
    merged.update(dotted)
    for flag, value in spec_args.items():
        key = K.SPEC_ARG_KEYS[flag]
        if key in json_cfg or key in dotted:
            findings.append(Finding(key=flag, message=f"`{flag} and {SPEC_CONFIG_FLAG}['{key}'] are mutually exclusive`",
                                    rule="--spec-* merge (0.22+)", fix=f"set '{key}' in one place only"))
        merged[key] = value
    return merged


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
            notes.append(Finding(key="prompt_lookup_min", severity="info", rule="V0 default 1; V1 copies the max",
                                 message="added prompt_lookup_min=1: V0 defaulted it to 1, V1 would copy the max"))
    elif cfg.get("model"):
        cfg = {"method": resolve_method(cfg), **cfg}
    return cfg, notes


def config_json(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, separators=(",", ":"))


def to_spec_args(cfg: dict[str, Any], version: K.Version) -> list[str] | None:
    """``--spec-method/--spec-model/--spec-tokens`` (0.22+), the other keys left in ``--speculative-config``."""
    if not K.surface_for(version).spec_args:
        return None
    argv: list[str] = []
    rest = dict(cfg)
    for flag, key in K.SPEC_ARG_KEYS.items():
        if key in rest:
            argv += [flag, str(rest.pop(key))]
    if rest:
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
        missing.append(Finding(key="method", severity="info", rule="legacy flags predate this method",
                               message=f"method '{method}' has no legacy flag form"))
    for key, value in rest.items():
        flag = by_key.get(key)
        if flag is None:
            missing.append(Finding(key=key, severity="info", rule="no legacy flag", message=f"'{key}' has no legacy flag"))
        elif flag in K.LEGACY_BOOLEAN_FLAGS:
            argv += [flag] if value else []
        else:
            argv += [flag, str(value)]
    return argv, missing
