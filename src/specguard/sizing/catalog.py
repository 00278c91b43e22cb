"""Built-in models and GPUs for ``specguard plan``, from the models' published config.json files.

A model entry holds what memory depends on: attention shape (GQA or MLA),
parameter count and native weight format, plus what method choice needs
(family, vocabulary, MTP layers). A local Hugging Face directory is read the
same way, with its real weight files' size instead of an estimate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from specguard.errors import UsageError
from specguard.sizing.kv import AttentionShape, shape_from_hf_config

GIB = 1024**3
MIB = 1024**2


class ModelEntry(BaseModel):
    name: str
    family: str = Field(description="same-family drafts share a tokenizer")
    shape: AttentionShape
    hidden_size: int
    num_attention_heads: int | None = Field(default=None, description="query heads; vLLM splits them across TP ranks")
    intermediate_size: int | None = None
    vocab_size: int
    max_position_embeddings: int
    params: float = Field(description="parameters, whole model")
    native_dtype: str = "bfloat16"
    weight_bytes: int | None = Field(default=None, description="size of the local weight files, when known")
    mtp_layers: int = 0
    mtp_params: float = 0.0
    sliding_window_layers: int = Field(default=0, description="layers with a sliding window (counted as full here)")
    source: str = "catalog"

    @property
    def decoder_layer_params(self) -> float:
        """One decoder layer's parameters (attention and dense MLP); an EAGLE head is about this size."""
        h = self.hidden_size
        heads_dim = self.shape.num_kv_heads * self.shape.head_dim
        inter = self.intermediate_size or 4 * h
        return 2 * h * h + 2 * h * heads_dim + 3 * h * inter


class GpuEntry(BaseModel):
    """A GPU's memory for ``plan``; its speeds for ``sim``'s roofline (vendor datasheets, dense, no sparsity)."""

    name: str
    memory_bytes: int = Field(description="total memory as the driver reports it")
    hbm_bytes_per_s: float | None = Field(default=None, description="memory bandwidth, bytes/s")
    bf16_flops: float | None = Field(default=None, description="dense BF16 tensor-core peak, FLOP/s")
    link_bytes_per_s: float | None = Field(
        default=None, description="GPU-to-GPU bandwidth one way (NVLink, or PCIe where there is none), bytes/s"
    )


def _m(
    name: str,
    family: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    head_dim: int,
    inter: int | None,
    vocab: int,
    max_pos: int,
    params_b: float,
    **extra: Any,
) -> ModelEntry:
    return ModelEntry(
        name=name,
        family=family,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=inter,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        params=params_b * 1e9,
        shape=AttentionShape(num_layers=layers, num_kv_heads=kv, head_dim=head_dim),
        **extra,
    )


MODELS: dict[str, ModelEntry] = {
    m.name: m
    for m in [
        _m("llama-3-8b", "llama3", 32, 4096, 32, 8, 128, 14336, 128256, 8192, 8.03),
        _m("llama-3-70b", "llama3", 80, 8192, 64, 8, 128, 28672, 128256, 8192, 70.55),
        _m("llama-3.1-8b", "llama3", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 8.03),
        _m("llama-3.1-70b", "llama3", 80, 8192, 64, 8, 128, 28672, 128256, 131072, 70.55),
        _m("llama-3.1-405b", "llama3", 126, 16384, 128, 8, 128, 53248, 128256, 131072, 405.85),
        _m("llama-3.2-1b", "llama3", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 1.24),
        _m("llama-3.2-3b", "llama3", 28, 3072, 24, 8, 128, 8192, 128256, 131072, 3.21),
        _m("llama-3.3-70b", "llama3", 80, 8192, 64, 8, 128, 28672, 128256, 131072, 70.55),
        _m("qwen2.5-0.5b", "qwen2.5", 24, 896, 14, 2, 64, 4864, 151936, 32768, 0.49),
        _m("qwen2.5-1.5b", "qwen2.5", 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1.54),
        _m("qwen2.5-3b", "qwen2.5", 36, 2048, 16, 2, 128, 11008, 151936, 32768, 3.09),
        _m("qwen2.5-7b", "qwen2.5", 28, 3584, 28, 4, 128, 18944, 152064, 32768, 7.62),
        _m("qwen2.5-14b", "qwen2.5", 48, 5120, 40, 8, 128, 13824, 152064, 32768, 14.77),
        _m("qwen2.5-32b", "qwen2.5", 64, 5120, 40, 8, 128, 27648, 152064, 32768, 32.76),
        _m("qwen2.5-72b", "qwen2.5", 80, 8192, 64, 8, 128, 29568, 152064, 32768, 72.71),
        _m("qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960, 0.6),
        _m("qwen3-1.7b", "qwen3", 28, 2048, 16, 8, 128, 6144, 151936, 40960, 1.7),
        _m("qwen3-4b", "qwen3", 36, 2560, 32, 8, 128, 9728, 151936, 40960, 4.02),
        _m("qwen3-8b", "qwen3", 36, 4096, 32, 8, 128, 12288, 151936, 40960, 8.19),
        _m("qwen3-14b", "qwen3", 40, 5120, 40, 8, 128, 17408, 151936, 40960, 14.77),
        _m("qwen3-32b", "qwen3", 64, 5120, 64, 8, 128, 25600, 151936, 40960, 32.76),
        _m("mistral-7b", "mistral", 32, 4096, 32, 8, 128, 14336, 32768, 32768, 7.25),
        _m("mistral-large-2407", "mistral", 88, 12288, 96, 8, 128, 28672, 32768, 131072, 122.6),
        _m("mixtral-8x7b", "mixtral", 32, 4096, 32, 8, 128, None, 32000, 32768, 46.7),
        _m("mixtral-8x22b", "mixtral", 56, 6144, 48, 8, 128, None, 32768, 65536, 140.6),
        _m(
            "gpt-oss-20b",
            "gpt-oss",
            24,
            2880,
            64,
            8,
            64,
            None,
            201088,
            131072,
            20.9,
            native_dtype="mxfp4",
            sliding_window_layers=12,
        ),
        _m(
            "gpt-oss-120b",
            "gpt-oss",
            36,
            2880,
            64,
            8,
            64,
            None,
            201088,
            131072,
            116.8,
            native_dtype="mxfp4",
            sliding_window_layers=18,
        ),
        ModelEntry(
            name="deepseek-v3",
            family="deepseek-v3",
            hidden_size=7168,
            num_attention_heads=128,
            vocab_size=129280,
            max_position_embeddings=163840,
            params=671e9,
            native_dtype="fp8",
            mtp_layers=1,
            mtp_params=14e9,
            shape=AttentionShape(num_layers=61, kv_lora_rank=512, qk_rope_head_dim=64),
        ),
    ]
}

GPUS: dict[str, GpuEntry] = {
    g.name: g
    for g in [
        # SXM parts: NVLink 4 is 900 GB/s both ways on H100/H200, NVLink 3 600 GB/s on A100, NVLink 5 1.8 TB/s on B200.
        GpuEntry(name="h100-80gb", memory_bytes=81559 * MIB, hbm_bytes_per_s=3.35e12, bf16_flops=989e12, link_bytes_per_s=450e9),
        GpuEntry(name="h200-141gb", memory_bytes=143771 * MIB, hbm_bytes_per_s=4.8e12, bf16_flops=989e12, link_bytes_per_s=450e9),
        GpuEntry(name="a100-40gb", memory_bytes=40960 * MIB, hbm_bytes_per_s=1.555e12, bf16_flops=312e12, link_bytes_per_s=300e9),
        GpuEntry(name="a100-80gb", memory_bytes=81920 * MIB, hbm_bytes_per_s=2.039e12, bf16_flops=312e12, link_bytes_per_s=300e9),
        # No NVLink: PCIe Gen4 x16, 32 GB/s one way.
        GpuEntry(name="l40s", memory_bytes=46068 * MIB, hbm_bytes_per_s=864e9, bf16_flops=362e12, link_bytes_per_s=32e9),
        GpuEntry(name="b200", memory_bytes=183359 * MIB, hbm_bytes_per_s=8e12, bf16_flops=2250e12, link_bytes_per_s=900e9),
    ]
}


class CatalogError(UsageError):
    pass


def _weight_bytes(path: Path) -> int | None:
    files = [p for pattern in ("*.safetensors", "*.bin", "*.pt") for p in path.glob(pattern)]
    return sum(p.stat().st_size for p in files) or None


def model_from_dir(path: Path) -> ModelEntry:
    config_path = path / "config.json" if path.is_dir() else path
    try:
        cfg = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{config_path}: cannot read a Hugging Face config.json ({exc})") from exc
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    try:
        shape = shape_from_hf_config(cfg)
        hidden = int(text["hidden_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"{config_path}: missing or bad key {exc} (expected a decoder config such as Llama's)") from exc
    weights = _weight_bytes(config_path.parent)
    inter = text.get("intermediate_size")
    entry = ModelEntry(
        name=str(path),
        family=str(text.get("model_type", "unknown")),
        shape=shape,
        hidden_size=hidden,
        num_attention_heads=int(text["num_attention_heads"]) if text.get("num_attention_heads") else None,
        intermediate_size=int(inter) if inter else None,
        vocab_size=int(text.get("vocab_size") or 0),
        max_position_embeddings=int(text.get("max_position_embeddings") or 0),
        params=0.0,
        native_dtype=str(text.get("torch_dtype") or text.get("dtype") or "bfloat16"),
        weight_bytes=weights,
        mtp_layers=int(text.get("num_nextn_predict_layers") or 0),
        source=f"local directory {path}",
    )
    per_layer = entry.decoder_layer_params
    entry.params = shape.num_layers * per_layer + 2 * hidden * entry.vocab_size
    return entry


def resolve_model(name_or_dir: str) -> ModelEntry:
    path = Path(name_or_dir)
    if path.exists():
        return model_from_dir(path)
    key = name_or_dir.lower().split("/")[-1].removesuffix("-instruct")
    if key in MODELS:
        return MODELS[key]
    raise CatalogError(f"unknown model '{name_or_dir}': give a local Hugging Face directory or one of " + ", ".join(MODELS))


def resolve_gpu(name: str | None, memory_gib: float | None, *, custom_hint: str | None = None) -> GpuEntry | None:
    """A catalog GPU, or a custom one of ``memory_gib``; ``custom_hint`` tells an unknown name how the caller
    takes a GPU outside the catalog (each command has its own option for that, or none)."""
    if memory_gib is not None:
        return GpuEntry(name=name or f"custom-{memory_gib:g}gib", memory_bytes=int(memory_gib * GIB))
    if name is None:
        return None
    if name.lower() in GPUS:
        return GPUS[name.lower()]
    hint = f"{custom_hint}, or " if custom_hint else ""
    raise CatalogError(f"unknown GPU '{name}': {hint}one of " + ", ".join(GPUS))


def check_tensor_parallel(model: ModelEntry, tp: int, option: str) -> None:
    """vLLM splits the query heads evenly across TP ranks, and the KV heads too (or replicates them when fewer)."""
    heads = model.num_attention_heads
    if heads and heads % tp:
        raise CatalogError(
            f"{option} {tp}: {model.name} has {heads} attention heads, which vLLM needs divisible by the tensor-parallel size"
        )
    kv = model.shape.num_kv_heads
    if kv and not model.shape.is_mla and (kv % tp if kv >= tp else tp % kv):
        raise CatalogError(
            f"{option} {tp}: {model.name} has {kv} KV heads; vLLM needs them divisible by the "
            "tensor-parallel size, or the size divisible by them"
        )
