"""The pinned inventory (checklist, Gate 3): everything that must stay fixed between baseline and candidate."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from specguard.errors import InputFileError
from specguard.validation import describe, read_input_text

INVENTORY_SCHEMA: Literal["specguard.inventory/1"] = "specguard.inventory/1"


class ModelIdentity(BaseModel):
    name: str = Field(description="as given to vLLM: a local path or a repository id")
    revision: str | None = Field(default=None, description="--revision / 'revision', when pinned")
    content_hash: str | None = Field(default=None, description="sha256 over a local directory's files")
    hash_method: str | None = None


class KvHeadroom(BaseModel):
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_tokens: int | None = None
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    cache_dtype: str | None = None
    kv_cache_usage: float | None = Field(default=None, description="fraction in use when recorded")


class Inventory(BaseModel):
    schema_version: Literal["specguard.inventory/1"] = INVENTORY_SCHEMA
    specguard_version: str
    recorded_at: str
    source: str = Field(description="launch spec, command line or running server, and where")
    vllm_version: str | None
    model: ModelIdentity
    draft: ModelIdentity | None = None
    speculative_config: dict[str, Any] | None = None
    gpu: str | None = None
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    mean_prompt_tokens: float | None = None
    mean_output_tokens: float | None = None
    kv: KvHeadroom = Field(default_factory=KvHeadroom)
    notes: list[str] = Field(default_factory=list)


class Difference(BaseModel):
    field: str
    a: Any
    b: Any
    variable: bool = Field(description="a deployment variable (counts towards 'one change at a time'), not a measurement")


class InventoryDiff(BaseModel):
    differences: list[Difference]
    changed_variables: list[str]
    warnings: list[str]


def load_inventory(path: Path) -> Inventory:
    """An inventory.json, or an ``InputFileError`` saying why it is not one."""
    text = read_input_text(path, "inventory")
    try:
        return Inventory.model_validate_json(text)
    except ValidationError as exc:
        raise InputFileError(f"{path}: not a specguard inventory: {'; '.join(describe(exc)[:3])}") from exc
