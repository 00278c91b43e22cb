"""The decision rule of a check, pure: per-cell comparisons in, GO / NO-GO / INCONCLUSIVE with structured reasons out."""

from specguard.verdict.decide import cell_status, crossovers, decide, objective_gain
from specguard.verdict.model import CellComparison, CellLine, Failure, OneArmCell, Reason, Status, Verdict, VerdictName

__all__ = [
    "CellComparison",
    "CellLine",
    "Failure",
    "OneArmCell",
    "Reason",
    "Status",
    "Verdict",
    "VerdictName",
    "cell_status",
    "crossovers",
    "decide",
    "objective_gain",
]
