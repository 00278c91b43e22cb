"""Warnings grouped by kind, with counts and the worst value: one line per kind instead of 24 near-copies.

The verdict's warnings are sentences (from ``analysis.summarize`` per run, ``verdict.decide`` per cell and
``check.baseline``), prefixed with where they happened; the ones of a known kind come with a ``WarningNote``
made beside the sentence (its kind, its number, the limit it crossed, where). ``group_warnings`` is a pure
function of both: a sentence is grouped by its note's kind, ranked by its note's value, and never read back
for a number. Every original sentence is kept in its group, so nothing is lost; a sentence without a note of
a kind below (a rarer warning, or one from a check reported before warnings were data) is a group of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specguard.report.model.warnings import WarningGroup
from specguard.results.models import WarningNote

__all__ = ["KINDS", "WarningKind", "group_warnings"]


@dataclass(frozen=True)
class WarningKind:
    """How the reports word a kind of warning, and which way its number is worse."""

    label: str  # "{limit}" is filled from the first note's limit
    unit: str = ""
    per: str = "runs"  # what one sentence stands for: a run's warning, or a cell's
    higher_is_worse: bool = True


KINDS: dict[str, WarningKind] = {
    "client_event_loop_lag": WarningKind("client event-loop lag above {limit} ms", " ms"),
    "client_send_lag": WarningKind("client send lag above {limit} ms", " ms"),
    "client_stalls": WarningKind("client stalls during streaming", " ms"),
    "foreign_traffic": WarningKind("foreign traffic on the server"),
    "low_acceptance": WarningKind("acceptance rate below 0.5", per="cells", higher_is_worse=False),
    "kv_usage_rose": WarningKind("KV-cache usage rose on the candidate", per="cells"),
    "waiting_rose": WarningKind("waiting requests rose on the candidate", per="cells"),
    "gpu_busier": WarningKind("candidate's GPUs busier for the same throughput", " %", per="cells"),
    "requests_failed": WarningKind("requests failed", " requests"),
    "all_failed": WarningKind("every request failed"),
    "scrape_gaps": WarningKind("/metrics scrapes failed", " scrapes"),
    "approximate_tokens": WarningKind("token counts not the server's"),
    "baseline_imported": WarningKind("baseline imported from an existing run, not measured", per="cells"),
}


def group_warnings(
    warnings: Sequence[str], notes: Sequence[WarningNote], runs: int | None = None, cells: int | None = None
) -> list[WarningGroup]:
    """The warnings grouped by kind, in the order each kind first appears; ``runs``/``cells`` give "N of M"."""
    by_text = {n.text: n for n in notes}
    groups: dict[str, WarningGroup] = {}
    for text in warnings:
        note = by_text.get(text)
        kind = KINDS.get(note.kind) if note is not None else None
        if note is None or kind is None:
            groups[f"other:{text}"] = WarningGroup(kind=f"other:{len(groups)}", label=text, count=1, texts=[text])
            continue
        g = groups.get(note.kind)
        if g is None:
            out_of = runs if kind.per == "runs" else cells
            label = kind.label.format(limit=f"{note.limit:g}" if note.limit is not None else "")
            g = groups[note.kind] = WarningGroup(
                kind=note.kind, label=label, count=0, out_of=out_of, per=kind.per, unit=kind.unit, texts=[]
            )
        g.count += 1
        g.texts.append(text)
        value = note.value
        if value is not None and (g.worst is None or (value > g.worst) == kind.higher_is_worse and value != g.worst):
            g.worst, g.worst_where = value, note.where
    for g in groups.values():
        if g.out_of is not None and g.out_of < g.count:
            g.out_of = None  # a count the caller could not know (e.g. warnings from more runs than stored): say just N
    return list(groups.values())
