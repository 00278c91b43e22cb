"""specguard's version-aware rules across releases it cannot run here (vllm-facts.md sections 1 and 2)."""

from __future__ import annotations

import pytest

from specguard.preflight.rules import RuleContext, check_config
from specguard.vllm import knowledge as K
from specguard.vllm.findings import errors


def _check(cfg: dict, version: str, **ctx: object):
    return check_config(cfg, RuleContext(version=K.parse_version(version), **ctx))


def _keys(findings, severity: str = "error") -> set[str]:
    return {f.key for f in findings if f.severity == severity}


NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
DRAFT = {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}


@pytest.mark.parametrize(("version", "accepted"), [("0.32.0", True), ("0.33.0", False)])
def test_medusa_is_gone_in_0_33(version: str, accepted: bool) -> None:
    findings = _check({"method": "medusa", "model": "/heads", "num_speculative_tokens": 3}, version)
    assert (not errors(findings)) is accepted
    if not accepted:
        assert "removed in 0.33.0" in errors(findings)[0].message and errors(findings)[0].fix


@pytest.mark.parametrize(("version", "accepted"), [("0.9.2", True), ("0.12.0", False), ("0.14.1", False), ("0.15.0", True)])
def test_draft_model_unsupported_in_v1_from_0_10_to_0_14(version: str, accepted: bool) -> None:
    assert (not errors(_check(DRAFT, version))) is accepted


@pytest.mark.parametrize(("version", "severity"), [("0.9.0", "error"), ("0.12.0", "warning"), ("0.16.0", "error")])
def test_unknown_keys_by_version(version: str, severity: str) -> None:
    findings = _check({**NGRAM, "num_spec_tokens": 4}, version)
    hit = [f for f in findings if f.key == "num_spec_tokens"]
    assert hit and hit[0].severity == severity
    assert "num_speculative_tokens" in hit[0].fix


@pytest.mark.parametrize(("version", "accepted"), [("0.11.0", False), ("0.12.0", True)])
def test_suffix_arrives_in_0_12(version: str, accepted: bool) -> None:
    findings = _check({"method": "suffix"}, version, packages={"arctic_inference": True})
    assert (not errors(findings)) is accepted


def test_suffix_without_arctic_inference_is_an_error_and_unknown_host_a_warning() -> None:
    assert _keys(_check({"method": "suffix"}, "0.32.0", packages={"arctic_inference": False})) == {"method"}
    assert not errors(_check({"method": "suffix"}, "0.32.0"))
    assert "method" in _keys(_check({"method": "suffix"}, "0.32.0"), "warning")


@pytest.mark.parametrize(("version", "severity"), [("0.14.0", "warning"), ("0.15.0", "error")])
def test_tensor_parallel_size_trap(version: str, severity: str) -> None:
    hit = [f for f in _check({**DRAFT, "tensor_parallel_size": 2}, version) if f.key == "tensor_parallel_size"]
    assert hit[0].severity == severity and "draft_tensor_parallel_size" in hit[0].fix


@pytest.mark.parametrize(("version", "accepted"), [("0.25.0", False), ("0.30.0", True)])
def test_hyphenated_keys_from_0_30(version: str, accepted: bool) -> None:
    findings = _check({"method": "ngram", "num-speculative-tokens": 4}, version)
    assert (not errors(findings)) is accepted


def test_method_only_fields_are_warnings_and_min_above_max_an_error() -> None:
    findings = _check({**DRAFT, "prompt_lookup_min": 2, "suffix_decoding_max_tree_depth": 4}, "0.32.0")
    assert not errors(findings)
    assert _keys(findings, "warning") == {"prompt_lookup_min", "suffix_decoding_max_tree_depth"}
    assert _keys(_check({**NGRAM, "prompt_lookup_min": 4}, "0.32.0")) == set()  # max copies min
    assert _keys(_check({**NGRAM, "prompt_lookup_min": 6, "prompt_lookup_max": 5}, "0.32.0")) == {"prompt_lookup_min"}


def test_pard_and_misspelt_methods_get_a_fix() -> None:
    pard = errors(_check({"method": "pard", "model": "/d", "num_speculative_tokens": 3}, "0.32.0"))[0]
    assert "parallel_drafting" in pard.fix
    gpu = errors(_check({"method": "ngram-gpu", "num_speculative_tokens": 3}, "0.32.0"))[0]
    assert gpu.fix == "use 'ngram_gpu'"


def test_config_surface_absent_before_0_8_2() -> None:
    assert _keys(_check(NGRAM, "0.8.1")) == {"speculative_config"}


def test_draft_limits_against_target() -> None:
    ctx = {
        "tensor_parallel_size": 4,
        "target_max_model_len": 8192,
        "target_config": {"vocab_size": 128256},
        "draft_config": {"vocab_size": 32000, "max_position_embeddings": 4096},
    }
    findings = _check({**DRAFT, "draft_tensor_parallel_size": 2, "max_model_len": 6000}, "0.32.0", **ctx)
    assert _keys(findings) == {"draft_tensor_parallel_size", "max_model_len", "model"}
    ok = _check({**DRAFT, "draft_tensor_parallel_size": 4, "use_heterogeneous_vocab": True}, "0.32.0", **ctx)
    assert not errors(ok)


def test_every_error_names_key_rule_and_fix() -> None:
    bad = {
        "method": "ngram",
        "num_speculative_tokens": 0,
        "prompt_lookup_min": 0,
        "lookahead": 1,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.5, 0.9],
    }
    findings = errors(_check(bad, "0.32.0"))
    assert len(findings) >= 4
    for f in findings:
        assert f.key and f.message and f.rule


def test_versions_parse_with_local_suffixes() -> None:
    assert K.parse_version("0.32.0+cpu") == (0, 32, 0)
    assert K.parse_version("v0.11.0rc1") == (0, 11, 0)
    with pytest.raises(K.VersionParseError):
        K.parse_version("latest")


def test_surface_and_defaults_by_version() -> None:
    assert K.surface_for((0, 8, 1)).legacy_flags and not K.surface_for((0, 8, 1)).speculative_config
    assert not K.surface_for((0, 21, 0)).spec_args and K.surface_for((0, 22, 0)).spec_args
    assert K.default_gpu_memory_utilization((0, 19, 0)) == 0.9 and K.default_gpu_memory_utilization((0, 20, 0)) == 0.92
    assert K.lookahead_slots("ngram", 4) == 0 and K.lookahead_slots("dflash", 4) == 5 and K.lookahead_slots("eagle3", 3) == 3


def test_fly_and_n_predict_rules() -> None:
    fly = {"method": "ngram", "num_speculative_tokens": 1, "rejection_sample_method": "fly"}
    assert _keys(_check(fly, "0.33.0")) == {"num_speculative_tokens"}
    assert _keys(_check({**fly, "rejection_sample_method": "fly"}, "0.32.0")) == {"rejection_sample_method"}
    windowed = {**fly, "num_speculative_tokens": 4, "fly_window_size": 4}
    assert _keys(_check(windowed, "0.33.0")) == {"fly_window_size"}
    heads = {"method": "eagle", "model": "/eagle", "num_speculative_tokens": 5}
    assert _keys(_check(heads, "0.32.0", draft_config={"n_predict": 2})) == {"num_speculative_tokens"}
    assert not errors(_check({**heads, "num_speculative_tokens": 4}, "0.32.0", draft_config={"n_predict": 2}))


def test_method_detection_follows_vllm_0_32() -> None:
    """The corpus cannot carry these: its drafts are local Llama directories (vllm 0.32 config/speculative.py)."""
    from specguard.vllm.methods import resolve_method

    assert resolve_method({"model": "mypkg.MyProposer"}) == "custom_class"
    assert resolve_method({"model": "Qwen2.5-0.5B"}) == "draft_model"  # '5-0' is no identifier: a hub name
    assert resolve_method({"model": "org/my-eagle-eagle3"}) == "eagle"  # "eagle-" is looked for before "eagle3"
    assert resolve_method({"model": "/d"}, {"model_type": "deepseek_mtp"}) == "mtp"
    mtp_target = {"model_type": "deepseek_v3", "num_nextn_predict_layers": 1}
    # MTP takes the target as its draft only when num_speculative_tokens is given.
    assert _keys(_check({"method": "mtp"}, "0.32.0", target_config=mtp_target)) == {"num_speculative_tokens"}
    assert not errors(_check({"method": "mtp", "num_speculative_tokens": 1}, "0.32.0", target_config=mtp_target))


def test_every_field_has_a_type_where_types_are_checked() -> None:
    for version in ("0.32.0", "0.33.0"):
        assert K.fields_for(K.parse_version(version)) <= set(K.FIELD_TYPES)
