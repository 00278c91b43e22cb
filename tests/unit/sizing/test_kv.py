"""KV sizing against published figures and the embedded model set."""

import json

from specguard.sizing.kv import (
    AttentionShape,
    kv_bytes_per_token,
    num_blocks,
    page_size_bytes,
    shape_from_hf_config,
)

# Published configs (config.json fields that matter here).
LLAMA3_8B = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
LLAMA3_70B = {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 8192}
DEEPSEEK_V3 = {
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "hidden_size": 7168,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
}


def test_llama3_kv_bytes_per_token_bf16():
    assert kv_bytes_per_token(shape_from_hf_config(LLAMA3_8B), 2) == 128 * 1024
    assert kv_bytes_per_token(shape_from_hf_config(LLAMA3_70B), 2) == 320 * 1024


def test_tensor_parallel_splits_kv_heads_but_never_below_one():
    s = shape_from_hf_config(LLAMA3_70B)
    assert kv_bytes_per_token(s, 2, tp=4) == 80 * 1024
    assert kv_bytes_per_token(s, 2, tp=16) == 80 * 2 * 1 * 128 * 2  # 8 KV heads over 16 ranks: one each


def test_mla_stores_the_latent_once_and_ignores_tp():
    s = shape_from_hf_config(DEEPSEEK_V3)
    assert s.is_mla
    assert kv_bytes_per_token(s, 2) == 61 * (512 + 64) * 2
    assert kv_bytes_per_token(s, 2, tp=8) == kv_bytes_per_token(s, 2)


def test_draft_layers_share_the_pool_and_cost_blocks():
    target = AttentionShape(num_layers=4, num_kv_heads=2, head_dim=64)
    draft = AttentionShape(num_layers=1, num_kv_heads=2, head_dim=64)
    gib = 1 << 30
    alone = num_blocks(gib, [(target, 2)], block_size=16)
    shared = num_blocks(gib, [(target, 2), (draft, 2)], block_size=16)
    assert alone == gib // (4 * page_size_bytes(target, 16, 2))
    assert shared == gib // (5 * page_size_bytes(target, 16, 2))
    assert shared < alone


def test_embedded_target_config_shape(tmp_path):
    cfg = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "hidden_size": 256}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    from specguard.sizing.kv import shape_from_model_dir

    s = shape_from_model_dir(tmp_path)
    assert (s.num_layers, s.num_kv_heads, s.head_dim) == (4, 2, 64)
    assert kv_bytes_per_token(s, 2) == 4 * 2 * 2 * 64 * 2
