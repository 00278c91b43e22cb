"""The greedy-output table's rows: each temperature-0 cell's comparison as the verdict judged it, reshaped, not re-decided.

``equivalence_table`` lays out what the cells already hold (``CellComparison.equivalence``, counted by
``analysis.equivalence``) beside what the verdict made of it: whether the warning rule fired
(``verdict.guards.equivalence_warnings``, the same function ``decide`` calls) and, when the plan makes
divergence a guardrail, the outcome its reasons name. The difference's interval is the one both
the warning and the guardrail test (``budget_tests.error_difference_interval``). When there is no row,
``absent`` says why in one line: no temperature-0 setting, or no outputs recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

from specguard.analysis.equivalence import DivergenceStats
from specguard.number_format import MISSING, fmt, fmt_percent, fmt_share
from specguard.report.model.data import EquivalenceRow, EquivalenceTable, GuardOutcome
from specguard.verdict import CellComparison, Reason
from specguard.verdict.budget_tests import error_difference_interval
from specguard.verdict.guards import DIVERGENCE, divergence_counts, equivalence_warnings

__all__ = [
    "EQUIVALENCE_DEFINITIONS",
    "HEADER",
    "NO_GREEDY",
    "NO_OUTPUTS",
    "equivalence_intro",
    "equivalence_line",
    "equivalence_notes",
    "equivalence_table",
    "outcome_words",
    "row_texts",
]

# why there is no row; the renderers write "not compared: <this>"
NO_GREEDY = "the plan has no temperature-0 sampling setting (outputs are compared only under greedy decoding)"
NO_OUTPUTS = (
    "no temperature-0 cell has recorded outputs (no outputs.jsonl in its runs and no equivalence.json in the check directory)"
)

EQUIVALENCE_DEFINITIONS = {
    "greedy outputs table": "per temperature-0 cell: 'prompts' are the prompt items with a baseline reference output; "
    "'candidate differing' counts the candidate's requests whose output "
    "differs from the baseline's reference output of the same prompt item (its first successful request), of those "
    "compared; 'baseline own variation' counts the baseline's other requests (other repetitions, repeats in a run) "
    "against the same reference; 'difference' is candidate share - baseline share with its 95 % Newcombe interval; "
    "'first divergence' is the median / smallest position (token, or character where no token ids came back) of the "
    "first difference among the differing requests; 'result' says whether the warning rule fired and, with "
    "equivalence.guardrail, what the guardrail found (failed: NO-GO; straddles the budget: INCONCLUSIVE; unverified: "
    "an arm with nothing compared, e.g. one repetition)",
}

_CODES: dict[str, GuardOutcome] = {"output_diverged": "failed", "output_divergence_unresolved": "unresolved"}
_GUARD_WORDS: dict[GuardOutcome, str] = {
    "off": "",
    "within": "guardrail within budget",
    "unresolved": "guardrail straddles its budget (INCONCLUSIVE)",
    "failed": "guardrail failed (NO-GO)",
    "unverified": "guardrail unverified",
}


HEADER = (
    "cell",
    "prompts",
    "candidate differing",
    "baseline own variation",
    "difference, 95 % CI",
    "first divergence, candidate (median / min)",
    "first divergence, baseline (median / min)",
    "result",
)


def outcome_words(row: EquivalenceRow) -> str:
    """The result column: "warning; guardrail failed (NO-GO)", "no warning", ..."""
    parts = ["warning" if row.warned else "no warning", _GUARD_WORDS[row.guardrail]]
    return "; ".join(p for p in parts if p)


def _position(s: DivergenceStats, unit: str) -> str:
    if s.first_divergence_median is None:
        return MISSING
    return f"{fmt(s.first_divergence_median, 1)} / {s.first_divergence_min} ({unit})"


def row_texts(row: EquivalenceRow) -> list[str]:
    """One row's cells, in ``HEADER``'s order, as every report shows them."""
    diff = MISSING
    if row.difference is not None and row.difference_ci is not None:
        d, lo, hi = (fmt_percent(x, signed=True) for x in (row.difference, *row.difference_ci))
        diff = f"{d} (95 % CI {lo} to {hi})"
    return [
        row.cell + (" (target)" if row.target else ""),
        str(row.prompts),
        fmt_share(row.candidate.differing, row.candidate.compared),
        fmt_share(row.baseline.differing, row.baseline.compared),
        diff,
        _position(row.candidate, row.unit),
        _position(row.baseline, row.unit),
        outcome_words(row),
    ]


def equivalence_intro(t: EquivalenceTable) -> str:
    """What the table is held to: the guardrail's budget, or warnings only."""
    if t.guardrail:
        return (
            f"Greedy outputs are a guardrail here: the candidate's share of differing outputs may exceed the baseline's own "
            f"by at most {fmt_percent(t.budget)} (equivalence.max_extra_divergence)."
        )
    return "Greedy outputs are not a guardrail here (equivalence.guardrail: false): a divergence is a warning only."


def equivalence_notes(t: EquivalenceTable) -> list[str]:
    """Below the table: why a cell's positions are in characters, and the temperature-0 cells with no outputs."""
    notes = [f"{r.cell}: {r.note}" for r in t.rows if r.note]
    return notes + ([f"not compared (no outputs recorded): {', '.join(t.not_compared)}"] if t.not_compared else [])


def equivalence_line(t: EquivalenceTable | None) -> str | None:
    """The terminal's one line: totals over the compared cells, and what they raised; None without greedy sampling."""
    if t is None or not t.greedy:
        return None
    if t.absent is not None:
        return f"greedy outputs not compared: {t.absent}"
    cand = fmt_share(sum(r.candidate.differing for r in t.rows), sum(r.candidate.compared for r in t.rows))
    base = fmt_share(sum(r.baseline.differing for r in t.rows), sum(r.baseline.compared for r in t.rows))
    n = len(t.rows)
    out = f"greedy outputs ({n} cell{'s' if n != 1 else ''}): candidate differs in {cand}, the baseline from itself in {base}"
    warned = sum(r.warned for r in t.rows)
    out += f"; warning at {warned} cell{'s' if warned != 1 else ''}" if warned else "; no warning"
    if t.guardrail:
        bad: tuple[GuardOutcome, ...] = ("failed", "unresolved", "unverified")
        counts = {o: sum(r.guardrail == o for r in t.rows) for o in bad}
        found = [
            f"{_GUARD_WORDS[o].removeprefix('guardrail ')} at {k} cell{'s' if k != 1 else ''}" for o, k in counts.items() if k
        ]
        out += "; guardrail " + (", ".join(found) if found else "within budget everywhere")
    return out


def _guard(cell: CellComparison, reasons: Sequence[Reason], guardrail: bool) -> GuardOutcome:
    if not guardrail:
        return "off"
    for r in reasons:
        # level scope (the default) tests divergence once per traffic level: its reason names the level, not the cell
        here = r.cell == cell.name or (r.cell is None and r.level == cell.traffic)
        if here and r.metric == DIVERGENCE and r.code in _CODES:
            return _CODES[r.code]
    assert cell.equivalence is not None  # the caller's rows have one
    (_, nb), (_, nc) = divergence_counts(cell.equivalence)
    # an unverified guardrail's own reason may have been condensed into "... and N more", so it is read from the counts
    return "unverified" if nb == 0 or nc == 0 else "within"


def _row(cell: CellComparison, reasons: Sequence[Reason], guardrail: bool) -> EquivalenceRow:
    eq = cell.equivalence
    assert eq is not None
    (db, nb), (dc, nc) = divergence_counts(eq)
    note = f"{cell.name}: {eq.note}" if eq.note else None
    both = nb > 0 and nc > 0
    return EquivalenceRow(
        cell=cell.name,
        target=cell.target,
        unit=eq.unit,
        prompts=eq.prompts,
        baseline=eq.baseline,
        candidate=eq.candidate,
        difference=dc / nc - db / nb if both else None,
        difference_ci=error_difference_interval((db, nb), (dc, nc)) if both else None,
        warned=any(w != note for w in equivalence_warnings(cell)),
        guardrail=_guard(cell, reasons, guardrail),
        note=eq.note,
    )


def equivalence_table(
    cells: Sequence[CellComparison],
    reasons: Sequence[Reason],
    greedy_sampling: set[str],
    guardrail: bool,
    budget: float,
) -> EquivalenceTable:
    """One row per cell at a temperature-0 setting (``greedy_sampling``: their names) that has a comparison."""
    greedy = [c for c in cells if c.sampling in greedy_sampling]
    rows = [_row(c, reasons, guardrail) for c in greedy if c.equivalence is not None]
    absent = NO_GREEDY if not greedy_sampling else NO_OUTPUTS if not rows else None
    return EquivalenceTable(
        rows=rows,
        greedy=bool(greedy_sampling),
        guardrail=guardrail,
        budget=budget,
        not_compared=[c.name for c in greedy if c.equivalence is None] if rows else [],
        absent=absent,
    )
