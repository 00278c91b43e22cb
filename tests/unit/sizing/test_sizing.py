"""Gate 2 and 3 arithmetic and method choice, on the catalog's published shapes."""

from __future__ import annotations

import pytest

from specguard.sizing.catalog import GIB, MODELS, CatalogError, resolve_gpu, resolve_model
from specguard.sizing.kv import kv_bytes_per_token
from specguard.sizing.recommend import Gate1Evidence, gate1_evidence, recommend
from specguard.sizing.run import PlanRequest, build_plan


def _plan(**kw: object):
    return build_plan(PlanRequest(vllm_version="0.32.0", **kw))


def test_catalog_kv_sizes_match_published_figures() -> None:
    assert kv_bytes_per_token(MODELS["llama-3.1-8b"].shape, 2) == 128 * 1024
    assert kv_bytes_per_token(MODELS["llama-3.1-70b"].shape, 2) == 320 * 1024
    assert kv_bytes_per_token(MODELS["deepseek-v3"].shape, 2) == 61 * (512 + 64) * 2  # MLA latent + rope, one "head"
    assert kv_bytes_per_token(MODELS["deepseek-v3"].shape, 2, tp=8) == 61 * 576 * 2  # MLA is not split by TP


def test_plan_reports_whole_model_kv_and_splits_per_gpu() -> None:
    p = _plan(target="llama-3.1-70b", gpu="h200-141gb", tensor_parallel_size=4, prompt_len=1000, output_len=200)
    assert p.target.kv_bytes_per_token == 320 * 1024
    assert p.baseline.kv_bytes_per_token_per_gpu == 80 * 1024
    expected_budget = -(-143771 * 1024**2 * 92 // 100) - p.target.weight_bytes / 4 - 2 * GIB
    assert p.baseline.kv_budget_bytes_per_gpu == pytest.approx(expected_budget)
    assert p.baseline.kv_blocks == int(expected_budget) // (80 * 1024 * 16)
    assert p.baseline.max_concurrency == p.baseline.kv_blocks // 75  # 1200 tokens = 75 blocks of 16


def test_ngram_costs_no_kv_and_a_draft_costs_its_layers_and_lookahead() -> None:
    ngram = _plan(target="llama-3.1-8b", gpu="h100-80gb", method="ngram", prompt_len=500, output_len=200)
    assert ngram.speculative.kv_tokens == ngram.baseline.kv_tokens and ngram.headroom_lost_percent == 0
    draft = _plan(
        target="llama-3.1-70b",
        gpu="h100-80gb",
        tensor_parallel_size=4,
        draft="llama-3.2-1b",
        prompt_len=500,
        output_len=200,
        num_speculative_tokens=5,
    )
    d = draft.speculative
    assert d.kv_bytes_per_token_per_gpu == 80 * 1024 + 16 * 2 * 2 * 64 * 2  # 1B draft: 8 KV heads x 64 over TP 4
    assert d.weights_bytes_per_gpu == pytest.approx(draft.target.weight_bytes / 4 + draft.draft.weight_bytes / 4)
    assert d.lookahead_slots == 5 and d.tokens_per_sequence == 705
    assert d.kv_tokens < draft.baseline.kv_tokens and 0 < draft.headroom_lost_percent < 100


def test_medusa_heads_cost_weights_but_no_kv() -> None:
    p = _plan(target="llama-3.1-8b", gpu="h100-80gb", method="medusa", draft="llama-3.2-1b", num_speculative_tokens=3)
    assert p.speculative.kv_bytes_per_token_per_gpu == p.baseline.kv_bytes_per_token_per_gpu
    assert p.speculative.weights_bytes_per_gpu > p.baseline.weights_bytes_per_gpu


def test_expected_concurrency_warning_and_weights_that_do_not_fit() -> None:
    p = _plan(
        target="llama-3.1-70b",
        gpu="h100-80gb",
        tensor_parallel_size=4,
        draft="llama-3.1-8b",
        prompt_len=1000,
        output_len=300,
        expected_concurrency=300,
    )
    assert p.speculative.max_concurrency < 300 <= p.baseline.max_concurrency
    assert any("pushes the expected concurrency" in w for w in p.warnings)
    big = _plan(target="llama-3.1-405b", gpu="h100-80gb")
    assert big.baseline.kv_blocks == 0 and any("nothing is left" in w for w in big.warnings)


def test_fixed_kv_budget_and_fp8_cache() -> None:
    p = _plan(target="llama-3.1-8b", kv_cache_memory_gib=1, kv_cache_dtype="fp8", block_size=128)
    assert p.baseline.kv_blocks == GIB // (64 * 1024 * 128)


def test_recommendations() -> None:
    mtp = _plan(target="deepseek-v3", gpu="h200-141gb", tensor_parallel_size=8, dtype="fp8")
    assert mtp.method == "mtp" and mtp.speculative.lookahead_slots == 1
    assert mtp.speculative.kv_bytes_per_token_per_gpu == 62 * 576 * 2  # 61 target + 1 MTP layer; fp8 weights, bf16 KV
    ngram = _plan(target="llama-3.1-70b", gpu="h200-141gb", tensor_parallel_size=4)
    assert ngram.method == "ngram" and "llama-3.2-1b" in ngram.recommendation.candidate_drafts
    assert ngram.config == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    assert ngram.spec_args[:4] == ["--spec-method", "ngram", "--spec-tokens", "4"] and not ngram.config_findings
    old = build_plan(PlanRequest(target="llama-3.1-8b", gpu="h100-80gb", vllm_version="0.21.0"))
    assert old.spec_args is None and old.config_json
    poor = recommend(MODELS["llama-3.1-8b"], None, None, Gate1Evidence(poor_candidate=True, source="g1.json"))
    assert poor.method is None
    cross = recommend(MODELS["llama-3.1-70b"], MODELS["qwen2.5-0.5b"], None, None)
    assert any("family" in c for c in cross.cautions) and any("vocabularies" in c for c in cross.cautions)


def test_gate1_report_reading() -> None:
    report = {
        "segments": {
            "chat": {"verdict": "poor candidate", "ngram": {"acceptance_rate": 0.1}},
            "code": {"verdict": "good candidate", "ngram": {"acceptance_rate": 0.7}},
        }
    }
    ev = gate1_evidence(report, "a.json")
    assert not ev.poor_candidate and ev.ngram_acceptance == 0.7
    assert gate1_evidence(
        {"segments": {"chat": {"verdict": "leave speculation off"}, "code": {"verdict": "poor candidate"}}}, "b"
    ).poor_candidate


def test_catalog_errors_name_the_choices(tmp_path) -> None:
    with pytest.raises(CatalogError, match="llama-3.1-8b"):
        resolve_model("llama-9")
    with pytest.raises(CatalogError, match="h100-80gb"):
        resolve_gpu("tpu-v5", None)
    assert resolve_model("meta-llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 2}')
    with pytest.raises(CatalogError, match="config.json"):
        resolve_model(str(tmp_path))


def test_gate1_report_supplies_lengths_and_can_veto(tmp_path) -> None:
    import json

    report = tmp_path / "assess.json"
    report.write_text(
        json.dumps(
            {
                "mean_prompt_tokens": 812.4,
                "mean_output_tokens": 190.0,
                "segments": {"extraction": {"verdict": "good candidate", "ngram": {"acceptance_rate": 0.62}}},
            }
        )
    )
    p = _plan(target="llama-3.1-8b", gpu="h100-80gb", gate1=report)
    assert p.method == "ngram" and "62%" in p.recommendation.reasons[0]
    assert p.baseline.tokens_per_sequence == 812 + 190
    report.write_text(json.dumps({"segments": {"chat": {"verdict": "leave speculation off"}}}))
    off = _plan(target="llama-3.1-8b", gpu="h100-80gb", gate1=report)
    assert off.method is None and off.config is None and off.speculative.kv_tokens == off.baseline.kv_tokens
