"""vLLM's per-GPU scheduler defaults (vllm/knowledge.py), as ``sim`` resolves an unset --max-num-seqs and
--max-num-batched-tokens, and the GPU hint each caller of ``resolve_gpu`` gives."""

from __future__ import annotations

import pytest

from specguard.sim.run import SimRequest, build_arms
from specguard.sizing.catalog import GPUS, CatalogError, resolve_gpu
from specguard.vllm.knowledge import SCHEDULER_DEFAULTS, default_scheduler_limits


def test_the_table_is_vllm_0_32s_arg_utils() -> None:
    # vllm/engine/arg_utils.py of 0.32, for the OpenAI server: H100/H200 1024/8192, B200 1024/16384, others 256/2048
    assert default_scheduler_limits("h100-80gb") == default_scheduler_limits("H200-141GB") == (1024, 8192)
    assert default_scheduler_limits("b200") == (1024, 16384)
    assert default_scheduler_limits("a100-80gb") == default_scheduler_limits("l40s") == (256, 2048)
    assert set(SCHEDULER_DEFAULTS) <= set(GPUS)  # keyed by catalog names, so none is unreachable


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_build_arms_resolves_unset_limits_per_gpu_and_keeps_given_ones(gpu: str) -> None:
    arms = build_arms(SimRequest(target="llama-3.1-8b", gpu=gpu, rates=[1.0]))
    assert (arms.max_num_seqs, arms.max_num_batched_tokens) == default_scheduler_limits(gpu)
    config = arms.engine_config(SimRequest(target="llama-3.1-8b", gpu=gpu, rates=[1.0]), speculative=False)
    assert (config.max_num_seqs, config.max_num_batched_tokens) == default_scheduler_limits(gpu)
    given = build_arms(SimRequest(target="llama-3.1-8b", gpu=gpu, rates=[1.0], max_num_seqs=8, max_num_batched_tokens=512))
    assert (given.max_num_seqs, given.max_num_batched_tokens) == (8, 512)


def test_the_unknown_gpu_hint_is_the_callers() -> None:
    with pytest.raises(CatalogError) as plain:
        resolve_gpu("tpu-v5", None)
    assert "--gpu-memory-gib" not in str(plain.value) and "h100-80gb" in str(plain.value)
    with pytest.raises(CatalogError, match="unknown GPU 'tpu-v5': use --gpu-memory-gib for a custom size, or one of h100"):
        resolve_gpu("tpu-v5", None, custom_hint="use --gpu-memory-gib for a custom size")
