"""The layout of a check directory, owned here and nowhere else.

DIR/check.json                         CheckRecord: the plan, its hash, the arms' inventories, failures
DIR/check-state.json                   CheckState: which blocks are done (written after every block)
DIR/runs/ARM/repN/TRAFFIC__SAMPLING__pI/   one ``bench`` run directory per cell of a block
DIR/logs/ARM-repN.log                  a launched server's log for that block
DIR/interrupted/TIME/ARM/repN/...      the partial runs of a block that was interrupted (kept, not reused)
DIR/verdict.json, report.md, report.html          the outcome of a complete check
DIR/equivalence.json                   StoredEquivalence: the greedy outputs' comparison per temperature-0 cell
DIR/report-partial.md, report-partial.html        what an interrupted check has (no verdict)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from specguard.results.run_dir import RunDir

ARMS = ("baseline", "candidate")


def cell_key(traffic: str, sampling: str, source_index: int) -> str:
    return f"{traffic}__{sampling}__p{source_index}"


@dataclass(frozen=True)
class CheckDir:
    root: Path

    @property
    def check_json(self) -> Path:
        return self.root / "check.json"

    @property
    def state_json(self) -> Path:
        return self.root / "check-state.json"

    @property
    def verdict_json(self) -> Path:
        return self.root / "verdict.json"

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def partial_md(self) -> Path:
        return self.root / "report-partial.md"

    @property
    def partial_html(self) -> Path:
        return self.root / "report-partial.html"

    @property
    def equivalence_json(self) -> Path:
        """The greedy-output comparison per temperature-0 cell, kept after the outputs are deleted."""
        return self.root / "equivalence.json"

    @property
    def cells_csv(self) -> Path:
        return self.root / "cells.csv"

    def block_dir(self, arm: str, rep: int) -> Path:
        return self.root / "runs" / arm / f"rep{rep}"

    def run_dir(self, arm: str, rep: int, key: str) -> Path:
        return self.block_dir(arm, rep) / key

    def arm_runs(self, arm: str) -> list[Path]:
        """Every run directory of an arm that has run.json, in repetition then cell order."""
        return sorted(p.parent for p in (self.root / "runs" / arm).glob(f"rep*/*/{RunDir.RUN}"))

    def has_summary(self, arm: str, rep: int, key: str) -> bool:
        return RunDir(self.run_dir(arm, rep, key)).has_summary()

    def measured_runs(self, arm: str, key: str, repetitions: int) -> list[Path]:
        """One cell's run directories of an arm, repetitions 1..N in order, those with a summary only."""
        return [self.run_dir(arm, r, key) for r in range(1, repetitions + 1) if self.has_summary(arm, r, key)]

    def server_log(self, arm: str, rep: int) -> Path:
        return self.root / "logs" / f"{arm}-rep{rep}.log"

    def interrupted_block_dir(self, arm: str, rep: int) -> Path:
        return self.root / "interrupted" / time.strftime("%Y%m%d-%H%M%S") / arm / f"rep{rep}"
