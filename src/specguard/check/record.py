"""check.json and check-state.json: what a check ran, and how far it got. One pydantic model per file."""

from __future__ import annotations

from pydantic import BaseModel, Field

from specguard import __version__
from specguard.check.plan import CheckPlan
from specguard.inventory.arm import ArmInventory
from specguard.verdict import Failure

__all__ = ["ArmInventory", "CheckRecord", "CheckState"]

CHECK_SCHEMA = "specguard.check/1"
STATE_SCHEMA = "specguard.check_state/1"


class CheckRecord(BaseModel):
    """check.json: everything needed to rebuild the verdict and the report from the stored runs."""

    schema_version: str = CHECK_SCHEMA
    tool_version: str = __version__
    plan_path: str
    plan: CheckPlan
    plan_sha256: str | None = Field(default=None, description="the validated plan and its prompts' content")
    inventory: dict[str, ArmInventory]
    failures: list[Failure]


class CheckState(BaseModel):
    """check-state.json: the blocks of the plan and those done; written after every block."""

    schema_version: str = STATE_SCHEMA
    plan_sha256: str
    blocks: list[str] = Field(description="every block of the plan, in run order ('ARM repN')")
    done: list[str] = Field(default_factory=list)
    inventory: dict[str, ArmInventory] = Field(default_factory=dict)
    failures: list[Failure] = Field(default_factory=list)

    @property
    def complete(self) -> bool:
        return set(self.blocks) <= set(self.done)

    @property
    def missing(self) -> list[str]:
        return [b for b in self.blocks if b not in self.done]
