"""Command lines, systemd units and the three speculation surfaces."""

from __future__ import annotations

import json

import pytest

from specguard.vllm import knowledge as K
from specguard.vllm.findings import errors
from specguard.vllm.serve_command import CommandError, extract_speculation, server_args, split_command
from specguard.vllm.spec_forms import legacy_to_config, to_legacy_flags, to_spec_args

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
    assert {f.key for f in errors(spec.findings)} == {
        "--speculative-model",
        "--num-speculative-tokens",
        "--ngram-prompt-lookup-max",
    }
    assert all("--speculative-config '{" in f.fix for f in errors(spec.findings))
    assert not errors(extract_speculation(server_args(split_command(UNIT)), (0, 8, 1)).findings)


def test_every_form_merges_like_vllm() -> None:
    # FlexibleArgumentParser appends the dotted keys as one more --speculative-config, which replaces the first.
    args = [
        "m",
        "--speculative_config",
        '{"method": "ngram"}',
        "--speculative-config.num_speculative_tokens",
        "4",
        "--spec-tokens",
        "3",
    ]
    spec = extract_speculation(args, (0, 32, 0))
    assert spec.config == {"num_speculative_tokens": 3}
    assert any("mutually exclusive" in f.message for f in spec.findings)
    assert {"speculative_config", "dotted_keys", "spec_args"} <= set(spec.forms)
    abbreviated = extract_speculation(["m", "--speculative", '{"method": "ngram", "num_speculative_tokens": 2}'], (0, 32, 0))
    assert abbreviated.config == {"method": "ngram", "num_speculative_tokens": 2}
    assert [f.severity for f in abbreviated.findings] == ["warning"]
    tok = extract_speculation(["m", "--spec-method", "ngram", "--spec-tok=4"], (0, 32, 0))
    assert tok.config == {"method": "ngram", "num_speculative_tokens": 4} and not errors(tok.findings)
    assert errors(extract_speculation(["m", "--spec-m", "ngram"], (0, 32, 0)).findings)  # method or model
    assert errors(extract_speculation(["m", "--speculative", "{}"], (0, 8, 2)).findings)  # also the legacy flags


def _config(*args: str, version: K.Version = (0, 32, 0)) -> tuple[object, list[str]]:
    spec = extract_speculation(["m", *args], version)
    return spec.config, [f.message for f in errors(spec.findings)]


def test_empty_object_and_null() -> None:
    assert _config("--speculative-config", "{}") == ({}, [])
    for off in ("null", "None", ""):
        assert _config("--speculative-config", off) == (None, [])
    assert _config() == (None, [])
    assert _config("--speculative-config", "null", "--spec-tokens", "4") == ({"num_speculative_tokens": 4}, [])
    assert _config("--spec-method", "ngram", "--spec-tokens", "4", "--speculative-config", "{}")[0] == {
        "method": "ngram",
        "num_speculative_tokens": 4,
    }


def test_speculative_config_is_json_only() -> None:
    for version in ((0, 8, 2), (0, 9, 0), (0, 32, 0)):
        config, errs = _config("--speculative-config", "{'method': 'ngram', 'num_speculative_tokens': 4}", version=version)
        assert config is None and any("not JSON" in m for m in errs)
    config, errs = _config("--speculative-config", "[1]")
    assert config is None and any("JSON object" in m for m in errs)


def test_the_last_occurrence_wins() -> None:
    assert _config(
        "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}', "--speculative-config", '{"method": "ngram"}'
    )[0] == {"method": "ngram"}
    assert (
        _config("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}', "--speculative-config", "null")[0]
        is None
    )
    assert _config("--spec-tokens", "0", "--spec-tokens", "4")[0] == {"num_speculative_tokens": 4}
    # the dotted keys come last whatever their place on the line
    assert _config("--speculative-config.num_speculative_tokens", "4", "--speculative-config", '{"method": "ngram"}')[0] == {
        "num_speculative_tokens": 4
    }
    assert _config("-sc.method", "ngram", "--speculative-config", "{}")[0] == {"method": "ngram"}


def test_dotted_keys_as_flexible_argument_parser_reads_them() -> None:
    config, _ = _config(
        "--speculative_config.method",
        "ngram",
        "--speculative-config.num-speculative-tokens",
        "1k",
        "--speculative-config.draft_load_config.load_format",
        "auto",
        "--speculative-config.synthetic_acceptance_rates+",
        "0.9,0.8",
    )
    assert config == {
        "method": "ngram",
        "num-speculative-tokens": 1000,
        "draft_load_config": {"load_format": "auto"},
        "synthetic_acceptance_rates": ["0.9", "0.8"],
    }
    assert _config("--speculative-config.num_speculative_tokens", "1_0")[0] == {"num_speculative_tokens": 10}
    # raw keys: the hyphenated key does not clash with --spec-tokens (vLLM normalises after the merge)
    assert _config("--spec-tokens", "4", "--speculative-config.num-speculative-tokens", "2")[1] == []


def test_spec_args_use_the_options_argparse_types() -> None:
    for bad in ("4.0", "true", "None", ""):
        config, errs = _config("--spec-method", "ngram", "--spec-tokens", bad)
        assert any("invalid int value" in m for m in errs), bad
    assert _config("--spec-method", "ngram", "--spec-tokens", "+4")[0] == {"method": "ngram", "num_speculative_tokens": 4}
    assert _config("--spec-method", "ngram", "--spec-tokens", "-2")[0]["num_speculative_tokens"] == -2
    assert any("expected one argument" in m for m in _config("--spec-model", "--spec-tokens", "4")[1])
    assert _config("--spec-method", "None", "--spec-model", "")[0] is None
    assert any("invalid choice" in m for m in _config("--spec-method", "NGRAM", "--spec-tokens", "4")[1])
    config, errs = _config("--spec-method", "null", "--spec-tokens", "4")
    assert any("invalid choice" in m for m in errs)


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
    back, _ = legacy_to_config({"--speculative-model": "/d", "--num-speculative-tokens": 3, "--speculative-max-model-len": 2048})
    assert back == cfg and not missing
    assert K.LEGACY_FLAG_KEYS["--ngram-prompt-lookup-min"] == "prompt_lookup_min"


@pytest.mark.parametrize(
    "cfg",
    [
        {"method": "ngram", "num_speculative_tokens": 4},
        {"method": "ngram", "num_speculative_tokens": True},
        {"method": "ngram", "num_speculative_tokens": False, "prompt_lookup_max": 3},
        {"method": "ngram", "num_speculative_tokens": 4.0},
        {"method": "ngram", "num_speculative_tokens": "4"},
        {"method": "ngram", "num_speculative_tokens": None},
        {"method": "ngram", "num_speculative_tokens": -2},
        {"method": "NGRAM", "num_speculative_tokens": 4},
        {"method": "None", "model": "None", "num_speculative_tokens": 3},
        {"method": "", "model": "", "num_speculative_tokens": 3},
        {"method": "draft_model", "model": "-draft.v2", "num_speculative_tokens": 3},
        {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 3, "max_model_len": 1024},
        {"method": "ngram", "num_speculative_tokens": 4, "num-speculative-tokens": 2},
        {"model": 5, "num_speculative_tokens": 1},
        {"method": "ngram", "num_speculative_tokens": 4, "draft_load_config": {"load_format": "auto"}},
        {},
    ],
    ids=repr,
)
def test_spec_args_round_trip(cfg: dict) -> None:
    """config -> --spec-* args -> the config vLLM's parser and create_speculative_config build from them."""
    argv = to_spec_args(cfg, (0, 32, 0))
    assert argv is not None and "True" not in argv and "False" not in argv
    spec = extract_speculation(["m", *argv], (0, 32, 0))
    assert spec.config == cfg and not errors(spec.findings), argv
    for key, value in cfg.items():  # same types too: a boolean k comes back as the int pydantic reads it as
        expected = int(value) if isinstance(value, bool) else value
        assert type(spec.config[key]) is type(expected) and spec.config[key] == expected


def test_boolean_k_is_written_as_an_int() -> None:
    assert to_spec_args({"method": "ngram", "num_speculative_tokens": True}, (0, 32, 0)) == [
        "--spec-method",
        "ngram",
        "--spec-tokens",
        "1",
    ]


def test_api_keys_never_reach_a_report() -> None:
    from specguard.preflight.run import run_preflight
    from specguard.vllm.server_spec import redact_argv

    assert redact_argv(["--api-key", "s3cr3t", "--api_key=s3cr3t", "--port", "1"]) == [
        "--api-key",
        "<redacted>",
        "--api_key=<redacted>",
        "--port",
        "1",
    ]
    args = server_args(
        split_command(
            'vllm serve org/m --api-key s3cr3t --speculative-config \'{"method": "ngram", "num_speculative_tokens": 4}\''
        )
    )
    report = run_preflight(vllm_version="0.32.0", command=args)
    assert "s3cr3t" not in report.model_dump_json() and report.valid is True
