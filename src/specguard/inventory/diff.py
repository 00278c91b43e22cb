"""What differs between two inventories, and whether more than one deployment variable changed. Pure."""

from __future__ import annotations

from typing import Any

from specguard.inventory.model import Difference, Inventory, InventoryDiff

# Deployment variables, each counted once however many of its fields differ. Speculation is one variable:
# its config and its draft model go together.
VARIABLES: dict[str, tuple[str, ...]] = {
    "vLLM version": ("vllm_version",),
    "model revision": ("model.name", "model.revision", "model.content_hash"),
    "speculation": ("speculative_config", "draft.name", "draft.revision", "draft.content_hash"),
    "GPU": ("gpu",),
    "tensor parallelism": ("tensor_parallel_size",),
    "max model len": ("max_model_len",),
    "dtype": ("dtype",),
    "quantization": ("quantization",),
    "KV-cache dtype": ("kv_cache_dtype",),
}
MEASURED = (
    "mean_prompt_tokens",
    "mean_output_tokens",
    "kv.num_gpu_blocks",
    "kv.block_size",
    "kv.kv_tokens",
    "kv.kv_cache_memory_bytes",
    "kv.gpu_memory_utilization",
    "kv.cache_dtype",
)


def _get(data: dict[str, Any], dotted: str) -> Any:
    value: Any = data
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def diff_inventories(a: Inventory, b: Inventory) -> InventoryDiff:
    da, db = a.model_dump(), b.model_dump()
    differences: list[Difference] = []
    changed: list[str] = []
    for variable, fields in VARIABLES.items():
        hit = False
        for f in fields:
            va, vb = _get(da, f), _get(db, f)
            if va != vb:
                differences.append(Difference(field=f, a=va, b=vb, variable=True))
                hit = True
        if hit:
            changed.append(variable)
    for f in MEASURED:
        va, vb = _get(da, f), _get(db, f)
        if va != vb:
            differences.append(Difference(field=f, a=va, b=vb, variable=False))
    warnings = []
    if len(changed) > 1:
        warnings.append(
            f"{len(changed)} variables changed between the two ({', '.join(changed)}): change one at a time, "
            "or the benchmark cannot say which one caused a difference (do not introduce quantization, a "
            "new model revision and speculation in the same benchmark)"
        )
    if a.model.content_hash is None and b.model.content_hash is None and a.model.revision is None and b.model.revision is None:
        warnings.append("the model is not pinned (no revision, no local content hash): a hub update would go unnoticed")
    return InventoryDiff(differences=differences, changed_variables=changed, warnings=warnings)
