"""An arm of a check as recorded: how it was served, and the pinned inventory when it first ran."""

from __future__ import annotations

from pydantic import BaseModel, Field

from specguard.inventory.model import Inventory


class ArmInventory(BaseModel):
    arm: str
    kind: str
    model: str
    vllm_version: str | None = None
    speculative_config: dict[str, object] | None = None
    max_model_len: int | None = None
    hardware: dict[str, str] = {}
    command: list[str] | None = None
    pinned: Inventory | None = Field(default=None, description="the Gate 3 inventory, recorded when the arm first ran")
