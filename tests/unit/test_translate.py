"""Command lines, systemd units and the three speculation surfaces."""

from __future__ import annotations

import json

import pytest

from specguard.preflight.findings import errors
from specguard.preflight.translate import (
    CommandError,
    extract_speculation,
    legacy_to_config,
    server_args,
    split_command,
    to_legacy_flags,
    to_spec_args,
)
from specguard.vllm import knowledge as K

UNIT = """[Service]
Environment=HF_HOME=/srv/hf
ExecStart=-/opt/vllm/bin/vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 \\
    --speculative-model [ngram] --num-speculative-tokens 5 \\
    --ngram-prompt-lookup-max 4
"""


def test_systemd_unit_with_continuations_and_prefix() -> None:
    args = server_args(split_command(UNIT))
    assert args[0] == "meta-llama/Llama-3.1-70B-Instruct" and "--ngram-prompt-lookup-max" in args


def test_legacy_ngram_translation_keeps_v0_meaning() -> None:
    spec = extract_speculation(server_args(split_command(UNIT)), (0, 32, 0))
    assert spec.forms == ["legacy_flags"]
    assert spec.config == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
    assert {f.key for f in errors(spec.findings)} == {"--speculative-model", "--num-speculative-tokens",
                                                       "--ngram-prompt-lookup-max"}
    assert all("--speculative-config '{" in f.fix for f in errors(spec.findings))
    assert not errors(extract_speculation(server_args(split_command(UNIT)), (0, 8, 1)).findings)


def test_every_form_merges_like_vllm() -> None:
    args = ["m", "--speculative_config", '{"method": "ngram"}', "--speculative-config.num_speculative_tokens", "4",
            "--spec-tokens", "3"]
    spec = extract_speculation(args, (0, 32, 0))
    assert spec.config == {"method": "ngram", "num_speculative_tokens": 3}
    assert any("mutually exclusive" in f.message for f in spec.findings)
    assert {"speculative_config", "dotted_keys", "spec_args"} <= set(spec.forms)
    abbreviated = extract_speculation(["m", "--speculative", '{"method": "ngram", "num_speculative_tokens": 2}'], (0, 32, 0))
    assert abbreviated.config == {"method": "ngram", "num_speculative_tokens": 2}
    assert [f.severity for f in abbreviated.findings] == ["warning"]


def test_spec_args_before_0_22_and_sc_before_0_19() -> None:
    spec = extract_speculation(["m", "--spec-method", "ngram", "--spec-tokens", "4"], (0, 21, 0))
    assert {f.key for f in errors(spec.findings)} == {"--spec-method", "--spec-tokens"}
    sc = extract_speculation(["m", "-sc", '{"method": "ngram", "num_speculative_tokens": 4}'], (0, 18, 0))
    assert {f.key for f in errors(sc.findings)} == {"-sc"}


def test_bad_json_is_a_finding_not_a_crash() -> None:
    spec = extract_speculation(["m", "--speculative-config", "{method: ngram"], (0, 32, 0))
    assert errors(spec.findings)[0].key == "--speculative-config"


def test_not_a_vllm_command() -> None:
    with pytest.raises(CommandError):
        server_args(split_command("python train.py --lr 1e-4"))


def test_round_trips() -> None:
    cfg = {"method": "draft_model", "model": "/d", "num_speculative_tokens": 3, "max_model_len": 2048}
    assert to_spec_args(cfg, (0, 21, 0)) is None
    argv = to_spec_args(cfg, (0, 22, 0))
    assert argv[:6] == ["--spec-method", "draft_model", "--spec-model", "/d", "--spec-tokens", "3"]
    assert json.loads(argv[-1]) == {"max_model_len": 2048}
    legacy, missing = to_legacy_flags(cfg)
    assert legacy == ["--speculative-model", "/d", "--num-speculative-tokens", "3", "--speculative-max-model-len", "2048"]
    back, _ = legacy_to_config({"--speculative-model": "/d", "--num-speculative-tokens": 3,
                                "--speculative-max-model-len": 2048})
    assert back == cfg and not missing
    assert K.LEGACY_FLAG_KEYS["--ngram-prompt-lookup-min"] == "prompt_lookup_min"


def test_api_keys_never_reach_a_report() -> None:
    from specguard.preflight.run import run_preflight
    from specguard.vllm.server_spec import redact_argv

    assert redact_argv(["--api-key", "s3cr3t", "--api_key=s3cr3t", "--port", "1"]) == [
        "--api-key", "<redacted>", "--api_key=<redacted>", "--port", "1"]
    args = server_args(split_command("vllm serve org/m --api-key s3cr3t --speculative-config "
                                     "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'"))
    report = run_preflight(vllm_version="0.32.0", command=args)
    assert "s3cr3t" not in report.model_dump_json() and report.valid is True
