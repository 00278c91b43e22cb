"""check.json and check-state.json: what a check ran, and how far it got. One pydantic model per file."""

from __future__ import annotations

from pydantic import BaseModel, Field

from specguard import __version__
from specguard.check.plan import CheckPlan
from specguard.check.sweep import SweepRecord
from specguard.inventory.arm import ArmInventory
from specguard.results.foreign.run import ImportedBaseline
from specguard.verdict import Failure
from specguard.verdict.model import LookRecord

__all__ = ["ArmInventory", "CheckRecord", "CheckState", "block_name"]

CHECK_SCHEMA = "specguard.check/1"
STATE_SCHEMA = "specguard.check_state/1"


def block_name(rep: int, arm: str, stage: str | None = None) -> str:
    """'ARM repN', or a sweep stage's 'STAGE ARM repN' (the sweep's stages each run every block)."""
    return f"{stage + ' ' if stage else ''}{arm} rep{rep}"


class CheckRecord(BaseModel):
    """check.json: everything needed to rebuild the verdict and the report from the stored runs."""

    schema_version: str = CHECK_SCHEMA
    tool_version: str = __version__
    plan_path: str
    plan: CheckPlan
    plan_sha256: str | None = Field(default=None, description="the validated plan and its prompts' content")
    inventory: dict[str, ArmInventory]
    failures: list[Failure]
    sweep: SweepRecord | None = Field(default=None, description="a sweep's stages: the rates chosen and why")
    baseline_imports: list[ImportedBaseline] = Field(
        default_factory=list, description="cells whose baseline came from an existing run (--baseline-run), not measured"
    )
    repetitions_run: int | None = Field(
        default=None, description="check --until-decided: the repetitions run so far, the plan's and the further ones"
    )
    looks: list[LookRecord] = Field(default_factory=list, description="check --until-decided: every look, in order")

    @property
    def measured_plan(self) -> CheckPlan:
        """The plan with the levels and repetitions it measured: a sweep's chosen levels, a sequential check's
        further repetitions (a cell without a run of a later repetition, a level decided before it, is read as
        it is: every reader takes the runs that have a summary)."""
        plan = self.plan.with_levels(self.sweep.levels) if self.sweep is not None else self.plan
        if self.repetitions_run is not None and self.repetitions_run > plan.repetitions:
            plan = plan.model_copy(update={"repetitions": self.repetitions_run})
        return plan


class CheckState(BaseModel):
    """check-state.json: the blocks of the plan and those done; written after every block."""

    schema_version: str = STATE_SCHEMA
    plan_sha256: str
    blocks: list[str] = Field(description="every block of the plan, in run order ('ARM repN'; a sweep's 'STAGE ARM repN')")
    done: list[str] = Field(default_factory=list)
    inventory: dict[str, ArmInventory] = Field(default_factory=dict)
    failures: list[Failure] = Field(default_factory=list)
    sweep: SweepRecord | None = Field(default=None, description="a sweep's stages so far; blocks grow with them")
    repetitions_run: int | None = Field(default=None, description="check --until-decided: repetitions run or begun")
    block_cells: dict[str, list[str]] = Field(
        default_factory=dict, description="check --until-decided: a further block's cells (its undecided ones); absent: all"
    )
    looks: list[LookRecord] = Field(default_factory=list, description="check --until-decided: every look so far")

    @property
    def complete(self) -> bool:
        return set(self.blocks) <= set(self.done) and (self.sweep is None or self.sweep.finished)

    @property
    def missing(self) -> list[str]:
        unfinished = ["sweep (its later stages not yet chosen)"] if self.sweep is not None and not self.sweep.finished else []
        return [b for b in self.blocks if b not in self.done] + unfinished
