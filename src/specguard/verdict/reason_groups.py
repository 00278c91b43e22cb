"""The verdict's reasons grouped by kind: one line per kind, with its count and the range of its numbers.

Grouped from each ``Reason``'s code, metric, place and numbers, never by parsing its sentence: a reworded
reason cannot fall out of its group. Deciding reasons (a NO-GO's first-rank ones; every reason of an
INCONCLUSIVE, each one a further look could resolve) are never folded into a group with the others.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from specguard.verdict.model import Reason

__all__ = ["ReasonGroup", "group_reasons"]

# What each code says, as the group's verb ("P99 TTFT unverified at 3 levels").
PHRASES: dict[str, str] = {
    "guardrail_unverified": "unverified",
    "guardrail_unresolved": "straddles its budget",
    "guardrail_regressed": "regressed",
    "error_rate_rose": "rose",
    "error_rate_unresolved": "straddles its budget",
    "objective_undersampled": "too few samples",
    "objective_undecided": "not yet decided",
    "objective_worse": "worse",
    "objective_no_difference": "no detectable improvement",
    "objective_below_minimum": "below the minimum improvement",
    "goodput_dropped": "dropped",
    "goodput_unresolved": "straddles its budget",
    "output_diverged": "diverged",
    "output_divergence_unresolved": "straddles its budget",
    "preemptions_rose": "rose",
    "cell_one_arm": "measured on one arm only",
    "baseline_mismatch": "baseline of other prompts",
}

# Numbers shown as a range, in this order, with their unit; others stay in verdict.json's reason_details.
RANGES: list[tuple[str, str]] = [
    ("requests_per_arm", "{} requests per arm"),
    ("more_requests_needed", "{} more needed"),
    ("ratio", "x{}"),
    ("gain", "gain {}"),
]


class ReasonGroup(BaseModel):
    """Reasons of one kind (code and metric) on one side of the decision, counted, with their numbers' ranges."""

    kind: str = Field(description="the reasons' code")
    metric: str | None = None
    deciding: bool = Field(description="first-rank reasons (they decided the verdict), never mixed with the others")
    count: int = Field(ge=1)
    text: str = Field(description="one line: what, how many, where, and the range of the members' numbers")
    members: list[int] = Field(description="the members' indices in the verdict's reasons (reason_details)")
    places: list[str] = Field(description="each member's cell, 'level <name>', or 'the whole check'")


def _place(r: Reason) -> str:
    if r.cell:
        return r.cell
    if r.level:
        return f"level {r.level}"
    return "the whole check" if r.metric else "-"


def _fmt(key: str, lo: float, hi: float) -> str:
    if key in ("ratio",):
        a, b = f"{lo:.2f}", f"{hi:.2f}"
    elif key == "gain":
        a, b = f"{lo:.0%}", f"{hi:.0%}"
    else:
        a, b = f"{lo:.0f}", f"{hi:.0f}"
    return a if a == b else f"{a}-{b}"


def _where(places: Sequence[str]) -> str:
    cells = [p for p in places if not p.startswith("level ") and p not in ("the whole check", "-")]
    levels = [p for p in places if p.startswith("level ")]
    parts = []
    if cells:
        parts.append(f"{len(set(cells))} cell{'s' if len(set(cells)) != 1 else ''}")
    if levels:
        parts.append(f"{len(set(levels))} level{'s' if len(set(levels)) != 1 else ''}")
    if "the whole check" in places:
        parts.append("the whole check")
    return " and ".join(parts)


def _ranges(members: Sequence[Reason]) -> list[str]:
    out = []
    for key, unit in RANGES:
        values = [r.numbers[key] for r in members if key in r.numbers]
        if values:
            out.append(unit.format(_fmt(key, min(values), max(values))))
    requests = [r.numbers[k] for r in members for k in ("requests_baseline", "requests_candidate") if k in r.numbers]
    if requests and not any("requests_per_arm" in r.numbers for r in members):
        out.insert(0, f"{_fmt('requests', min(requests), max(requests))} requests per arm")
    errors = [r.numbers[k] for r in members for k in ("errors_baseline", "errors_candidate") if k in r.numbers]
    if errors:
        out.append(f"{_fmt('errors', min(errors), max(errors))} errors per arm")
    lows = [r.numbers["ci_low"] for r in members if "ci_low" in r.numbers]
    highs = [r.numbers["ci_high"] for r in members if "ci_high" in r.numbers]
    if lows and highs and members[0].metric == "error_rate":
        out.append(f"CI {min(lows) * 100:+.1f} to {max(highs) * 100:+.1f} points")
    elif lows and highs:
        out.append(f"CI x{min(lows):.2f} to x{max(highs):.2f}")
    return out


def _text(r0: Reason, members: Sequence[Reason], places: Sequence[str]) -> str:
    if r0.code == "guardrails_unverified_more":
        count = sum(int(r.numbers.get("count", 0)) for r in members)
        return f"{count} more unverified guardrails (see the report)"
    name = "error rate" if r0.metric == "error_rate" else (r0.metric or r0.code.replace("_", " "))
    phrase = PHRASES.get(r0.code, r0.code.replace("_", " "))
    where = _where(places)
    prep = "over" if where == "the whole check" else "at"
    head = (
        f"{name}: {phrase}"
        + (f" {prep} {where}" if where else "")
        + (f" ({len(members)} reasons)" if len(members) != len(set(places)) else "")
    )
    ranges = _ranges(members)
    return head + (", " + ", ".join(ranges) if ranges else "")


def group_reasons(reasons: Sequence[Reason]) -> list[ReasonGroup]:
    """The reasons by (deciding, code, metric), in the order each group first appears, deciding groups first."""
    keys: dict[tuple[bool, str, str | None], list[int]] = {}
    for i, r in enumerate(reasons):
        if r.code == "go":
            continue
        keys.setdefault((not r.secondary, r.code, r.metric), []).append(i)
    groups = []
    for (deciding, code, metric), idx in keys.items():
        members = [reasons[i] for i in idx]
        places = [_place(r) for r in members]
        text = _text(members[0], members, places)
        groups.append(
            ReasonGroup(kind=code, metric=metric, deciding=deciding, count=len(idx), text=text, members=idx, places=places)
        )
    return sorted(groups, key=lambda g: not g.deciding)
