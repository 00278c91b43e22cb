"""Where speculation helps and where it hurts, read off the measured levels: one line per sampling x segment.

``crossovers`` names the first bracket where it stops paying; this says the whole range in the operator's
words ("helps up to QPS 8, hurts from QPS 12"), and only when the measured levels say so. Levels whose objective
could not be judged (``inconclusive``: too few samples) decide nothing and are named. Of the others, "helps up to
X" is the highest load at and below which every level's objective interval was better, "hurts from Y" the lowest
at and above which every level's was worse; a group that does not both help at its low end and hurt at its high
end gets no line (the per-level lines and the bracket still say what it measured). Levels in between are named
with their status.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence

from specguard.verdict.decide import cell_status, crossover_brackets, crossover_text
from specguard.verdict.model import CellComparison


def _load(value: float, per_second: bool) -> str:
    return f"QPS {value:g}" if per_second else f"offered load {value:g}"


def help_hurt_lines(cells: Sequence[CellComparison], higher_is_better: bool, rate_levels: Collection[str]) -> list[str]:
    """Per sampling x segment whose levels cross: "speculation helps up to QPS X, hurts from QPS Y".

    ``rate_levels``: the traffic levels whose offered load is requests/s (QPS); any other load is named as such.
    """
    return list(_help_hurt(cells, higher_is_better, rate_levels).values())


def crossover_lines(cells: Sequence[CellComparison], higher_is_better: bool, rate_levels: Collection[str]) -> list[str]:
    """One crossover line per sampling x segment: its help/hurt range where it has one, else its first bracket.

    Both say where speculation stops paying; printed together they said it twice for the same group (issue 29).
    """
    ranges = _help_hurt(cells, higher_is_better, rate_levels)
    brackets = {
        (x.sampling, x.segment): crossover_text(x)
        for x in crossover_brackets(cells, higher_is_better)
        if (x.sampling, x.segment) not in ranges
    }
    return [*ranges.values(), *brackets.values()]


def _help_hurt(
    cells: Sequence[CellComparison], higher_is_better: bool, rate_levels: Collection[str]
) -> dict[tuple[str, str], str]:
    groups: dict[tuple[str, str], list[CellComparison]] = defaultdict(list)
    for c in cells:
        groups[(c.sampling, c.segment)].append(c)
    out: dict[tuple[str, str], str] = {}
    for (sampling, segment), group in groups.items():
        group = sorted(group, key=lambda c: c.offered_load)
        status = [cell_status(c, higher_is_better) for c in group]
        judged = [i for i, st in enumerate(status) if st != "inconclusive"]
        helps = 0  # judged[:helps] were better, judged[hurts:] worse
        while helps < len(judged) and status[judged[helps]] == "better":
            helps += 1
        hurts = len(judged)
        while hurts > helps and status[judged[hurts - 1]] == "worse":
            hurts -= 1
        if helps == 0 or hurts == len(judged):
            continue
        qps = all(c.traffic in rate_levels for c in group)
        low, high = judged[helps - 1], judged[hurts]
        line = (
            f"{sampling} / {segment}: speculation helps up to {_load(group[low].offered_load, qps)}, "
            f"hurts from {_load(group[high].offered_load, qps)}"
        )
        named = [i for i, st in enumerate(status) if st == "inconclusive" or low < i < high]
        others = [f"{_load(group[i].offered_load, qps)} {status[i]}" for i in named]
        out[(sampling, segment)] = line + (f" (not in either: {', '.join(others)})" if others else "")
    return out
