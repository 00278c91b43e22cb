"""The decision rule of a check, pure: per-cell comparisons in, GO / NO-GO / INCONCLUSIVE with structured reasons out."""

from specguard.verdict.decide import cell_status, crossover_brackets, crossovers, decide, objective_gain
from specguard.verdict.model import CellComparison, CellLine, Crossover, Failure, OneArmCell, Reason, Status, Verdict, VerdictName

__all__ = [
    "CellComparison",
    "CellLine",
    "Crossover",
    "Failure",
    "OneArmCell",
    "Reason",
    "Status",
    "Verdict",
    "VerdictName",
    "cell_status",
    "crossover_brackets",
    "crossovers",
    "decide",
    "objective_gain",
]
