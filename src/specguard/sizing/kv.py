"""KV-cache sizing as vLLM V1 does it (vllm-facts.md section 6). Pure.

Per full-attention layer and token, a rank holds K and V for its share of the
KV heads: 2 x max(1, kv_heads // tp) x head_dim x dtype bytes. MLA layers hold
one compressed latent plus the rotary part: (kv_lora_rank + qk_rope_head_dim)
x dtype bytes, not split by TP. Draft layers (draft_model, EAGLE, MTP) share
the target's block pool, so they count towards every token; n-gram and suffix
proposers add none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

DTYPE_BYTES = {
    "auto": 2,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "float": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
DEFAULT_BLOCK_SIZE = 16


class AttentionShape(BaseModel):
    """What the KV cache of one model depends on."""

    num_layers: int = Field(gt=0)
    num_kv_heads: int = Field(default=0, ge=0)
    head_dim: int = Field(default=0, ge=0)
    kv_lora_rank: int | None = Field(default=None, description="MLA: the compressed KV latent")
    qk_rope_head_dim: int | None = None

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None


def layer_bytes_per_token(shape: AttentionShape, dtype_bytes: int, tp: int = 1) -> int:
    if shape.is_mla:
        return ((shape.kv_lora_rank or 0) + (shape.qk_rope_head_dim or 0)) * dtype_bytes
    return 2 * max(1, shape.num_kv_heads // tp) * shape.head_dim * dtype_bytes


def kv_bytes_per_token(shape: AttentionShape, dtype_bytes: int = 2, tp: int = 1) -> int:
    """KV bytes one token occupies on one rank, over all layers of the model."""
    return shape.num_layers * layer_bytes_per_token(shape, dtype_bytes, tp)


def page_size_bytes(shape: AttentionShape, block_size: int = DEFAULT_BLOCK_SIZE, dtype_bytes: int = 2, tp: int = 1) -> int:
    """One block of one layer."""
    return block_size * layer_bytes_per_token(shape, dtype_bytes, tp)


def num_blocks(
    available_bytes: int, layers: list[tuple[AttentionShape, int]], block_size: int = DEFAULT_BLOCK_SIZE, tp: int = 1
) -> int:
    """Blocks in the shared pool: ``layers`` lists (shape, dtype bytes) of the target and, if any, draft.

    Every block holds one page in every layer, so a block costs the sum of the layers' pages.
    """
    per_block = sum(s.num_layers * page_size_bytes(s, block_size, d, tp) for s, d in layers)
    return available_bytes // per_block if per_block else 0


def shape_from_hf_config(config: dict[str, Any]) -> AttentionShape:
    """The attention shape from a Hugging Face config.json (Llama, Qwen, Mistral, Mixtral, DeepSeek-V3 style)."""
    text = config.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else config
    layers = int(cfg["num_hidden_layers"])
    if cfg.get("kv_lora_rank"):
        return AttentionShape(
            num_layers=layers, kv_lora_rank=int(cfg["kv_lora_rank"]), qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0)
        )
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    return AttentionShape(num_layers=layers, num_kv_heads=kv_heads, head_dim=head_dim)


def shape_from_model_dir(path: Path) -> AttentionShape:
    config_path = path / "config.json" if path.is_dir() else path
    return shape_from_hf_config(json.loads(config_path.read_text()))
