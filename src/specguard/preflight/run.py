"""Gate 0: the installed vLLM, its speculation surface, and whether a config or command would be accepted.

vLLM itself is asked first (its own config classes, in a subprocess of its
interpreter); specguard's version-aware rules always run too, and are the
answer where vLLM cannot be imported. When both answer and disagree, vLLM's
answer stands and a finding says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from specguard.preflight import discover
from specguard.preflight.rules import RuleContext, check_config
from specguard.server_metrics.server_facts import ServerFacts, inspect_server
from specguard.vllm import knowledge as K
from specguard.vllm.findings import Finding, errors
from specguard.vllm.serve_command import (
    extract_speculation,
    model_argument,
    option_value,
)
from specguard.vllm.server_spec import redact_argv
from specguard.vllm.spec_forms import config_json, to_legacy_flags, to_spec_args


class SurfaceReport(K.Surface):
    options: list[str] = Field(default_factory=list, description="speculation options the parser lists")
    source: str = ""


class Translations(BaseModel):
    speculative_config: str | None = Field(default=None, description="the --speculative-config JSON")
    spec_args: list[str] | None = Field(default=None, description="--spec-* form, where the version has it")
    legacy_flags: list[str] | None = Field(default=None, description="pre-0.8.3 flags, for reading old runbooks")


class PreflightReport(BaseModel):
    version: str
    version_source: str
    found_by: str
    python: str | None = None
    executable: str | None = None
    workarounds: list[str] = Field(default_factory=list)
    surface: SurfaceReport
    methods: list[str]
    fields: list[str]
    checked_by: list[str] = Field(description="vllm (its own config classes) and/or specguard-rules")
    valid: bool | None = Field(description="None when no config or command was given")
    config: dict[str, Any] | None = None
    command: list[str] | None = None
    command_forms: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    translations: Translations | None = None
    server: ServerFacts | None = None


def _read_json(path: Path) -> dict[str, Any] | None:
    config = path / "config.json" if path.is_dir() else None
    if config is None or not config.exists():
        return None
    try:
        value = json.loads(config.read_text())
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _vllm_findings(answer: dict[str, Any], fields: list[str]) -> list[Finding]:
    if answer.get("accepted"):
        return [Finding(key="note", severity="info", source="vllm", message=n) for n in answer.get("notes", [])]
    text = answer.get("error", "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # pydantic: "N validation error(s) for SpeculativeConfig" then the field name, then the message.
    key = lines[1] if len(lines) > 2 and "validation error" in lines[0] and " " not in lines[1] else ""
    message = lines[-1] if lines else answer.get("error_type", "refused")
    message = message.split(" [type=")[0]
    if answer.get("error_type") == "ArgumentError":
        key, message = "command", message.replace("probe_script.py: error:", "vllm serve:")
    if not key:
        named = sorted((message.find(f), f) for f in fields if f in message)
        key = named[0][1] if named else "speculative_config"
    return [
        Finding(key=key, message=f"{answer.get('error_type')}: {message}", source="vllm", rule="vLLM's own config validation")
    ]


def run_preflight(
    python: Path | None = None,
    vllm: Path | None = None,
    vllm_version: str | None = None,
    config: dict[str, Any] | None = None,
    command: list[str] | None = None,
    target: Path | None = None,
    tensor_parallel_size: int = 1,
    max_model_len: int | None = None,
    url: str | None = None,
    api_key: str | None = None,
) -> PreflightReport:
    spec = None
    rules_version = K.parse_version(vllm_version) if vllm_version else None
    if command is not None:
        spec = extract_speculation(command, rules_version or K.LATEST_KNOWN)
        model = model_argument(command)
        target = target or (Path(model) if model and Path(model).is_dir() else None)
        tp_text = option_value(command, "--tensor-parallel-size", "-tp")
        tensor_parallel_size = int(tp_text) if tp_text and tp_text.isdigit() else tensor_parallel_size
        mml = option_value(command, "--max-model-len")
        max_model_len = int(mml) if mml and mml.isdigit() else max_model_len
    checked = config if config is not None else (spec.config if spec else None)
    request = {
        "target": str(target) if target else None,
        "tensor_parallel_size": tensor_parallel_size,
        "max_model_len": max_model_len,
        "configs": [checked] if checked is not None else [],
        "argvs": [command] if command is not None else [],
    }

    answer = None
    if vllm_version and python is None and vllm is None:
        install = discover.VllmInstall(
            found_by="--vllm-version (no vLLM asked)", version=vllm_version, version_source="given with --vllm-version"
        )
    else:
        install, answer = discover.probe(discover.locate(python, vllm), request)
    if not install.version:
        raise discover.DiscoveryError(
            f"could not learn the vLLM version ({'; '.join(install.workarounds)}); pass --vllm-version to apply specguard's rules"
        )
    version = K.parse_version(install.version)
    if spec is not None and rules_version is None:
        spec = extract_speculation(command or [], version)

    surface = _surface(install, answer, version)
    target_config = _read_json(target) if target else None
    if max_model_len is None and target_config:
        max_model_len = target_config.get("max_position_embeddings")
    findings: list[Finding] = list(spec.findings) if spec else []
    checked_by = ["specguard-rules"]
    if checked is not None:
        draft = checked.get("model")
        ctx = RuleContext(
            version=version,
            tensor_parallel_size=tensor_parallel_size,
            target_max_model_len=max_model_len,
            target_config=target_config,
            draft_config=_read_json(Path(draft)) if isinstance(draft, str) and Path(draft).is_dir() else None,
            packages=answer.packages if answer else {},
        )
        findings += check_config(checked, ctx)
    valid = _decide(checked, command, answer, findings, checked_by)
    report = PreflightReport(
        version=install.version,
        version_source=install.version_source,
        found_by=install.found_by,
        python=str(install.python) if install.python else None,
        executable=str(install.executable) if install.executable else None,
        workarounds=install.workarounds,
        surface=surface,
        methods=answer.methods if answer and answer.methods is not None else K.methods_for(version),
        fields=sorted(set(answer.fields) - K.INTERNAL_FIELDS) if answer else sorted(K.fields_for(version)),
        checked_by=checked_by,
        valid=valid,
        config=checked,
        command=redact_argv(command) if command is not None else None,
        command_forms=spec.forms if spec else [],
        findings=findings,
        translations=_translations(checked, version) if checked is not None else None,
    )
    if url:
        report.server = inspect_server(url, api_key)
    return report


def _surface(install: discover.VllmInstall, answer: discover.ProbeAnswer | None, version: K.Version) -> SurfaceReport:
    if answer is not None:
        surface = K.surface_from_options(answer.options, version)
        return SurfaceReport(**surface.model_dump(), options=answer.options, source=f"vLLM's parser ({answer.parser})")
    options = discover.help_options(install)
    if options:
        surface = K.surface_from_options(options, version)
        return SurfaceReport(**surface.model_dump(), options=options, source=f"{install.executable} serve --help=all")
    return SurfaceReport(**K.surface_for(version).model_dump(), source="specguard's version table")


def _decide(
    checked: dict[str, Any] | None,
    command: list[str] | None,
    answer: discover.ProbeAnswer | None,
    findings: list[Finding],
    checked_by: list[str],
) -> bool | None:
    if checked is None and command is None:
        return None
    ours = not errors(findings)
    if answer is None:
        return ours
    checked_by.insert(0, "vllm")
    verdicts = []
    if command is not None and answer.argvs:
        findings += _vllm_findings(answer.argvs[0], answer.fields)
        verdicts.append(bool(answer.argvs[0].get("accepted")))
    if checked is not None and answer.configs:
        if command is None:
            findings += _vllm_findings(answer.configs[0], answer.fields)
        verdicts.append(bool(answer.configs[0].get("accepted")))
    theirs = all(verdicts)
    if theirs != ours:
        findings.append(
            Finding(
                key="preflight",
                severity="warning",
                rule="vLLM's answer stands",
                message=f"vLLM {'accepts' if theirs else 'refuses'} this but specguard's rules "
                f"{'refuse' if theirs else 'accept'} it; please report it",
            )
        )
    return theirs


def _translations(cfg: dict[str, Any], version: K.Version) -> Translations:
    legacy, _ = to_legacy_flags(cfg)
    return Translations(speculative_config=config_json(cfg), spec_args=to_spec_args(cfg, version), legacy_flags=legacy)
