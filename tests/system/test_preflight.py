"""Gate 0 against the real embedded vLLM: its own answers against specguard's rules, and the CLI contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from specguard.embedded.models import ModelSet
from specguard.embedded.runtime import API_SERVER_MODULE, VllmRuntime
from specguard.preflight import discover
from specguard.preflight.rules import RuleContext, check_config
from specguard.vllm import knowledge as K
from specguard.vllm.findings import errors
from specguard.vllm.serve_command import extract_speculation, server_args, split_command

pytestmark = pytest.mark.vllm

CORPUS = yaml.safe_load((Path(__file__).parents[1] / "data" / "preflight_corpus.yaml").read_text())
MAX_MODEL_LEN = 1024


def _fill(value: Any, dirs: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, path in dirs.items():
            value = value.replace("{" + name + "}", path)
        return value
    if isinstance(value, dict):
        return {k: _fill(v, dirs) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, dirs) for v in value]
    return value


@pytest.fixture(scope="module")
def dirs(models: ModelSet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    other = tmp_path_factory.mktemp("draft-other-vocab")
    cfg = json.loads((models.path("draft") / "config.json").read_text())
    cfg["vocab_size"] = 4096
    (other / "config.json").write_text(json.dumps(cfg))
    return {"target": str(models.path("target")), "draft": str(models.path("draft")), "draft_other_vocab": str(other)}


@pytest.fixture(scope="module")
def asked(runtime: VllmRuntime, dirs: dict[str, str]) -> dict[str, Any]:
    """One subprocess of the runtime's interpreter answers for the whole corpus."""
    configs = [_fill(c["config"], dirs) for c in CORPUS["configs"]]
    argvs = [server_args(split_command(_fill(c["command"], dirs))) for c in CORPUS["commands"]]
    install = discover.VllmInstall(found_by="test", python=runtime.python, env=runtime.env)
    _, answer = discover.probe(
        install, {"target": dirs["target"], "max_model_len": MAX_MODEL_LEN, "configs": configs, "argvs": argvs}
    )
    assert answer is not None, "the embedded vLLM could not be asked"
    return {"answer": answer, "configs": configs, "argvs": argvs}


def _context(dirs: dict[str, str], cfg: Any, answer: discover.ProbeAnswer, max_model_len: int) -> RuleContext:
    def read(path: str) -> dict[str, Any] | None:
        p = Path(path) / "config.json"
        return json.loads(p.read_text()) if p.exists() else None

    draft = cfg.get("model") if isinstance(cfg, dict) else None  # a corpus config may be any JSON value
    return RuleContext(
        version=K.parse_version(answer.version),
        target_max_model_len=max_model_len,
        target_config=read(dirs["target"]),
        draft_config=read(draft) if isinstance(draft, str) else None,
        packages=answer.packages,
    )


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS["configs"]) + len(CORPUS["commands"]) >= 30


def test_knowledge_tables_match_the_installed_vllm(asked: dict[str, Any]) -> None:
    answer: discover.ProbeAnswer = asked["answer"]
    version = K.parse_version(answer.version)
    assert K.fields_for(version) == set(answer.fields) - K.INTERNAL_FIELDS
    assert answer.methods is not None and set(K.methods_for(version)) == set(answer.methods)
    assert K.surface_from_options(answer.options, version) == K.surface_for(version)


@pytest.mark.parametrize("index", range(len(CORPUS["configs"])), ids=[c["name"] for c in CORPUS["configs"]])
def test_config_verdict_matches_vllm(index: int, asked: dict[str, Any], dirs: dict[str, str]) -> None:
    case = CORPUS["configs"][index]
    cfg = asked["configs"][index]
    theirs = asked["answer"].configs[index]
    findings = check_config(cfg, _context(dirs, cfg, asked["answer"], MAX_MODEL_LEN))
    _assert_same_verdict(case, theirs, findings)
    for f in findings:
        assert f.key and f.message and f.rule


def _assert_same_verdict(case: dict[str, Any], theirs: dict[str, Any], findings: list[Any]) -> None:
    """Same accept/reject answer, or, for a documented difference, the opposite one for the documented reason."""
    ours = not errors(findings)
    detail = f"vLLM: {theirs}\nspecguard: {[f.message for f in findings]}"
    if case.get("difference"):
        assert ours != theirs["accepted"], f"expected difference is gone ({case['difference']})\n{detail}"
        if not theirs["accepted"]:
            assert case.get("vllm_error"), f"a difference names the vLLM error it expects (vllm_error:)\n{detail}"
            assert case["vllm_error"] in (theirs.get("error") or ""), f"vLLM refused it for another reason\n{detail}"
    else:
        assert ours == theirs["accepted"], detail


@pytest.mark.parametrize("index", range(len(CORPUS["commands"])), ids=[c["name"] for c in CORPUS["commands"]])
def test_command_verdict_matches_vllm(index: int, asked: dict[str, Any], dirs: dict[str, str]) -> None:
    case = CORPUS["commands"][index]
    argv = asked["argvs"][index]
    theirs = asked["answer"].argvs[index]
    version = K.parse_version(asked["answer"].version)
    spec = extract_speculation(argv, version)
    findings = list(spec.findings)
    mml = int(argv[argv.index("--max-model-len") + 1]) if "--max-model-len" in argv else None
    if spec.config is not None:
        findings += check_config(spec.config, _context(dirs, spec.config, asked["answer"], mml or 2048))
    _assert_same_verdict(case, theirs, findings)


def _preflight(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "preflight", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_cli_contract_with_a_rejected_config(runtime: VllmRuntime) -> None:
    rc, report = _preflight(
        "--python", str(runtime.python), "--config", '{"method": "ngram", "num_speculative_tokens": 4, "tensor_parallel_size": 2}'
    )
    assert rc == 1
    assert report["version"] == runtime.vllm_version
    assert report["surface"] == {**report["surface"], "legacy_flags": False, "speculative_config": True, "spec_args": True}
    assert "ngram" in report["methods"] and "draft_model" in report["methods"]
    assert report["valid"] is False and report["checked_by"] == ["vllm", "specguard-rules"]
    by_source = {(f["key"], f["source"]) for f in report["findings"]}
    assert ("tensor_parallel_size", "specguard") in by_source and ("tensor_parallel_size", "vllm") in by_source
    assert all(f["message"] and f["key"] for f in report["findings"])


def test_broken_console_script_is_reported_and_the_server_inspected(runtime: VllmRuntime, vllm_servers: dict[str, Any]) -> None:
    script = runtime.python.parent / "vllm"
    rc, report = _preflight(
        "--vllm",
        str(script),
        "--url",
        vllm_servers["ngram"].base_url,
        "--config",
        '{"method": "ngram", "num_speculative_tokens": 4}',
    )
    assert rc == 0 and report["valid"] is True
    assert report["version"] == runtime.vllm_version
    assert any("--version' fails" in w and "PackageNotFoundError" in w for w in report["workarounds"])
    server = report["server"]
    assert server["version"] == runtime.vllm_version and server["speculation_on"] is True
    assert "vllm:spec_decode_num_drafts_total" in server["spec_decode_counters"]
    assert int(server["cache_config"]["num_gpu_blocks"]) > 0
    assert server["models"][0]["id"]


def test_baseline_server_shows_speculation_off(vllm_servers: dict[str, Any]) -> None:
    rc, report = _preflight("--vllm-version", "0.32.0", "--url", vllm_servers["baseline"].base_url)
    assert rc == 0 and report["valid"] is None
    assert report["server"]["speculation_on"] is False and report["server"]["spec_decode_counters"] == []


def test_help_text_lists_the_same_speculation_options(runtime: VllmRuntime, asked: dict[str, Any]) -> None:
    """The --help=all reading (for an executable without an interpreter to ask) agrees with the parser object."""
    proc = subprocess.run(
        [str(runtime.python), "-m", API_SERVER_MODULE, "--help=all"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **runtime.env},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    from_help = [o for o in discover.options_from_help(proc.stdout) if "spec" in o or "ngram" in o or o == "-sc"]
    assert from_help == asked["answer"].options


def test_working_executable_without_an_interpreter_is_read_from_its_help(runtime: VllmRuntime, tmp_path: Path) -> None:
    """A shell-wrapped vllm (no Python #! line to follow): version from --version, surface from --help=all."""
    wrapper = tmp_path / "vllm"
    env = " ".join(f"{k}={v}" for k, v in runtime.env.items())
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" = --version ]; then echo {runtime.vllm_version}; exit 0; fi\n'
        f'shift\nexec env {env} {runtime.python} -m {API_SERVER_MODULE} "$@"\n'
    )
    wrapper.chmod(0o755)
    rc, report = _preflight("--vllm", str(wrapper), "--config", '{"method": "medusa", "num_speculative_tokens": 3}')
    assert report["version"] == runtime.vllm_version and report["version_source"].endswith("--version")
    assert report["surface"]["source"].endswith("serve --help=all")
    assert report["surface"]["spec_args"] and report["surface"]["short_alias"] and not report["surface"]["legacy_flags"]
    assert report["checked_by"] == ["specguard-rules"]
    assert rc == 1 and any(f["key"] == "model" for f in report["findings"])  # medusa needs its heads
