"""The verdict's reasons as the reports show them: grouped by kind, each group with every one of its sentences."""

from __future__ import annotations

from specguard.report.model.data import VerdictFile
from specguard.verdict.model import LookRecord
from specguard.verdict.reason_groups import ReasonGroup, group_reasons
from specguard.verdict.sequential import SPENDING_REFERENCE

__all__ = ["grouped_reasons", "look_rows", "reason_groups", "LOOK_HEADER"]


def reason_groups(v: VerdictFile) -> list[ReasonGroup]:
    """The verdict's groups; computed from reason_details for a verdict.json written before they were stored."""
    return v.reason_groups or group_reasons(v.reason_details)


def grouped_reasons(v: VerdictFile) -> list[tuple[str, list[str]]]:
    """(group line, its sentences) for every group, deciding groups first; a group of one is (its sentence, []),
    and so is each reason of a verdict.json without structured reasons."""
    groups = reason_groups(v)
    if not groups or len(v.reason_details) != len(v.reasons):
        return [(r, []) for r in v.reasons]
    # A group of one is its own sentence: the group line would only shorten it.
    return [(g.text, [v.reasons[i] for i in g.members]) if g.count > 1 else (v.reasons[g.members[0]], []) for g in groups]


# Said under every looks table: which spending the looks' levels come from, with its reference (issue 25).
LOOKS_METHOD = (
    f"Each look decides at its share of the error: {SPENDING_REFERENCE}; the GO side's one-sided bounds and the "
    "NO-GO side's Holm family (5 %) each spend their own."
)
LOOK_HEADER = ["look", "requests per arm", "verdict", "alpha GO", "alpha NO-GO", "test", "interval", "p", "outcome"]


def look_rows(looks: list[LookRecord]) -> list[list[str]]:
    """One row per test of every look (the look's own columns on its first row only); a look without tests, one row."""
    rows = []
    for k in looks:
        head = [f"{k.index} of {k.of}", str(k.requests_per_arm), k.verdict, f"{k.alpha_go:.4f}", f"{k.alpha_nogo:.4f}"]
        if not k.tests:
            rows.append(head + ["", "", "", ""])
        for j, t in enumerate(k.tests):
            interval = f"{t.ci_low:.3g} to {t.ci_high:.3g}" if t.ci_low is not None and t.ci_high is not None else ""
            p = f"{t.p_value:.3g}" if t.p_value is not None else ""
            rows.append((head if j == 0 else [""] * len(head)) + [t.name, interval, p, t.outcome])
    return rows
