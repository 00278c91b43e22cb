"""The roofline against numbers worked out by hand from the datasheets and the models' config.json."""

from __future__ import annotations

import pytest

from specguard.sim.step_time import LinearProfile, ModelCost, ProposerCost, Roofline, RooflineCoefficients, StepLoad
from specguard.sizing.catalog import GPUS, MODELS

IDEAL = RooflineCoefficients(
    bandwidth_efficiency=1.0, compute_efficiency=1.0, attention_efficiency=1.0, fixed_overhead_s=0.0, allreduce_latency_s=0.0
)


def test_batch_one_bandwidth_floor_of_llama_3_8b_on_an_h100() -> None:
    # 8.03e9 parameters x 2 bytes = 16.06 GB read once per step at 3.35 TB/s: 4.794 ms, whatever the batch holds
    roof = Roofline(ModelCost.of(MODELS["llama-3-8b"], tp=1), GPUS["h100-80gb"], IDEAL)
    assert roof(StepLoad(seqs=1, batched_tokens=1)) == pytest.approx(16.06e9 / 3.35e12, rel=1e-9)
    assert roof(StepLoad(seqs=1, batched_tokens=1)) * 1e3 == pytest.approx(4.794, abs=1e-3)


def test_kv_reads_add_128_kib_per_token_of_llama_3_8b() -> None:
    roof = Roofline(ModelCost.of(MODELS["llama-3-8b"], tp=1), GPUS["h100-80gb"], IDEAL)
    base = roof(StepLoad(1, 1, 0))
    # 32 layers x 2 (K, V) x 8 KV heads x 128 x 2 bytes = 131072 bytes per token of context
    assert roof(StepLoad(1, 1, 10_000)) - base == pytest.approx(10_000 * 131072 / 3.35e12, rel=1e-9)


def test_a_large_prefill_is_compute_bound_at_two_flops_per_parameter_and_token() -> None:
    roof = Roofline(ModelCost.of(MODELS["llama-3-8b"], tp=1), GPUS["h100-80gb"], IDEAL)
    parts = roof.parts(StepLoad(1, 8192, 8192, 0.0))
    assert parts["compute"] == pytest.approx(2 * 8.03e9 * 8192 / 989e12, rel=1e-9)  # 133 ms
    assert parts["compute"] > parts["memory"]
    assert roof(StepLoad(1, 8192, 8192, 0.0)) == pytest.approx(parts["compute"], rel=1e-9)


def test_tensor_parallel_splits_weights_and_adds_two_ring_all_reduces_per_layer() -> None:
    m = MODELS["llama-3-70b"]
    coeffs = IDEAL.model_copy(update={"allreduce_latency_s": 10e-6})
    roof = Roofline(ModelCost.of(m, tp=4), GPUS["h100-80gb"], coeffs)
    parts = roof.parts(StepLoad(64, 64, 0))
    assert parts["memory"] == pytest.approx(70.55e9 * 2 / 4 / 3.35e12, rel=1e-9)
    # 80 layers x 2 all-reduces, each 64 tokens x 8192 x 2 bytes x 2 (tp - 1) / tp over a 450 GB/s link, + 10 us
    per = 64 * 8192 * 2 * 2 * 3 / 4 / 450e9
    assert parts["allreduce"] == pytest.approx(160 * (10e-6 + per), rel=1e-9)
    assert roof(StepLoad(64, 64, 0)) == pytest.approx(max(parts["memory"], parts["compute"]) + parts["allreduce"], rel=1e-9)


def test_the_fast_call_equals_the_sum_of_the_parts() -> None:
    roof = Roofline(ModelCost.of(MODELS["qwen2.5-7b"], tp=2), GPUS["a100-80gb"])
    for load in (StepLoad(1, 1, 100, 100.0), StepLoad(32, 160, 40_000, 200_000.0), StepLoad(4, 4000, 5000, 3e6)):
        p = roof.parts(load)
        assert roof(load) == pytest.approx(p["fixed"] + max(p["memory"], p["compute"]) + p["allreduce"], rel=1e-12)


def test_linear_profile_and_its_scaling_to_a_draft() -> None:
    prof = LinearProfile(fixed_s=0.01, per_kv_token_s=1e-7, per_batched_token_s=2e-5)
    assert prof(StepLoad(4, 10, 1000)) == pytest.approx(0.01 + 1e-4 + 2e-4)
    half = prof.scaled(params_ratio=0.5, kv_ratio=0.25)
    assert half(StepLoad(4, 10, 1000)) == pytest.approx(0.005 + 0.25e-4 + 1e-4)


def test_proposer_costs_k_draft_passes_and_nearly_nothing_for_ngram() -> None:
    prof = LinearProfile(fixed_s=0.001, per_kv_token_s=0.0, per_batched_token_s=1e-6)
    draft = ProposerCost("draft_model", prof)
    # first pass over ~2 tokens a request, then k - 1 passes of one token each
    assert draft(8, 4, 800) == pytest.approx((0.001 + 16e-6) + 3 * (0.001 + 8e-6))
    assert ProposerCost("ngram")(8, 4, 800) < 1e-3
    assert draft(8, 0, 800) == 0.0
