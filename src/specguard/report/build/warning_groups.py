"""Warnings grouped by kind, with counts and the worst value: one line per kind instead of 24 near-copies.

The verdict's warnings are sentences (from ``analysis.summarize`` per run and ``verdict.decide`` per
cell), prefixed with where they happened: "steady / greedy: candidate: ..." for a run's client
warning, "steady / greedy / default: ..." for a cell's. ``group_warnings`` is a pure function of that
list: each sentence is matched against the kinds below (the patterns quote the producers' text), its
number read back, and the sentences of one kind counted. Every original sentence is kept in its group,
so nothing is lost; a sentence of no known kind is a group of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

__all__ = ["KINDS", "WarningGroup", "WarningKind", "group_warnings", "split_where"]


@dataclass(frozen=True)
class WarningKind:
    """A kind of warning: how to recognise it, what its number is and which way is worse."""

    kind: str
    pattern: re.Pattern[str]  # group "value": the number; group "limit" (optional): the threshold it crossed
    label: str  # "{limit}" is filled from the first match
    unit: str = ""
    per: str = "runs"  # what one sentence stands for: a run's warning, or a cell's
    higher_is_worse: bool = True


def _k(kind: str, pattern: str, label: str, unit: str = "", per: str = "runs", higher_is_worse: bool = True) -> WarningKind:
    return WarningKind(kind, re.compile(pattern), label, unit, per, higher_is_worse)


KINDS: tuple[WarningKind, ...] = (
    _k(
        "client_event_loop_lag",
        r"client event-loop lag p99 (?P<value>[\d.]+) ms exceeds (?P<limit>[\d.]+) ms",
        "client event-loop lag above {limit} ms",
        " ms",
    ),
    _k(
        "client_send_lag",
        r"client send lag p99 (?P<value>[\d.]+) ms exceeds (?P<limit>[\d.]+) ms",
        "client send lag above {limit} ms",
        " ms",
    ),
    _k(
        "client_stalls",
        r"requests were streaming while the client stalled.*longest (?P<value>[\d.]+) ms",
        "client stalls during streaming",
        " ms",
    ),
    _k("foreign_traffic", r"^foreign traffic", "foreign traffic on the server"),
    _k(
        "low_acceptance",
        r"acceptance rate (?P<value>[\d.]+) (?:< |is below )0\.5",
        "acceptance rate below 0.5",
        per="cells",
        higher_is_worse=False,
    ),
    _k(
        "kv_usage_rose",
        r"KV-cache usage rose on the candidate \([\d.]+ -> (?P<value>[\d.]+)",
        "KV-cache usage rose on the candidate",
        per="cells",
    ),
    _k(
        "waiting_rose",
        r"waiting requests rose on the candidate \([\d.]+ -> (?P<value>[\d.]+)",
        "waiting requests rose on the candidate",
        per="cells",
    ),
    _k(
        "gpu_busier",
        r"ran its GPUs busier .*-> (?P<value>[\d.]+) % mean",
        "candidate's GPUs busier for the same throughput",
        " %",
        per="cells",
    ),
    _k("requests_failed", r"^(?P<value>\d+) of \d+ requests failed", "requests failed", " requests"),
    _k("all_failed", r"^every request failed", "every request failed"),
    _k("scrape_gaps", r"^(?P<value>\d+) /metrics scrape", "/metrics scrapes failed", " scrapes"),
    _k("approximate_tokens", r"token counts are not the server's", "token counts not the server's"),
    _k(
        "baseline_imported",
        r"^baseline of cell \S+ imported from",
        "baseline imported from an existing run, not measured",
        per="cells",
    ),
)

# "traffic / sampling: arm: text" (a run's client warning) or "traffic / sampling / segment: text" (a cell's)
_RUN_WHERE = re.compile(r"^(?P<traffic>[^:/]+) / (?P<sampling>[^:/]+): (?P<arm>baseline|candidate): (?P<text>.*)$", re.S)
_CELL_WHERE = re.compile(r"^(?P<where>[^:/]+ / [^:/]+ / [^:/]+): (?P<text>.*)$", re.S)


class WarningGroup(BaseModel):
    """The warnings of one kind: how many, of how many, the worst value and where it was, every sentence."""

    kind: str
    label: str
    count: int
    out_of: int | None = None  # the runs (or cells) it could have appeared in, when known
    per: str = "runs"
    worst: float | None = None
    unit: str = ""
    worst_where: str | None = None
    texts: list[str]

    @property
    def line(self) -> str:
        """ "client event-loop lag above 10 ms in 24 of 24 runs, worst 287 ms at steady / production / candidate"."""
        if self.count == 1 and self.kind.startswith("other"):
            return self.texts[0]
        unit = self.per if self.count != 1 or self.out_of is not None else self.per.rstrip("s")
        count = f"{self.count} of {self.out_of} {self.per}" if self.out_of is not None else f"{self.count} {unit}"
        out = f"{self.label} in {count}"
        if self.worst is not None:
            out += f", worst {self.worst:g}{self.unit}"
        if self.worst_where:
            out += f" at {self.worst_where}"
        return out


def split_where(text: str) -> tuple[str | None, str]:
    """(where, sentence): "steady / greedy / candidate" for a run's warning, the cell's name for a cell's."""
    m = _RUN_WHERE.match(text)
    if m:
        return f"{m['traffic']} / {m['sampling']} / {m['arm']}", m["text"]
    m = _CELL_WHERE.match(text)
    if m:
        return m["where"], m["text"]
    return None, text


def _value(m: re.Match[str]) -> float | None:
    v = m.groupdict().get("value")
    return float(v.rstrip(".")) if v else None


def group_warnings(warnings: Sequence[str], runs: int | None = None, cells: int | None = None) -> list[WarningGroup]:
    """The warnings grouped by kind, in the order each kind first appears; ``runs``/``cells`` give "N of M"."""
    groups: dict[str, WarningGroup] = {}
    for text in warnings:
        where, sentence = split_where(text)
        kind = next((k for k in KINDS if k.pattern.search(sentence)), None)
        if kind is None:
            groups[f"other:{text}"] = WarningGroup(kind=f"other:{len(groups)}", label=sentence, count=1, texts=[text])
            continue
        m = kind.pattern.search(sentence)
        assert m is not None  # matched just above
        g = groups.get(kind.kind)
        if g is None:
            limit = m.groupdict().get("limit") or ""
            out_of = runs if kind.per == "runs" else cells
            label = kind.label.format(limit=f"{float(limit):g}" if limit else "")
            g = groups[kind.kind] = WarningGroup(
                kind=kind.kind, label=label, count=0, out_of=out_of, per=kind.per, unit=kind.unit, texts=[]
            )
        g.count += 1
        g.texts.append(text)
        value = _value(m)
        if value is not None and (g.worst is None or (value > g.worst) == kind.higher_is_worse and value != g.worst):
            g.worst, g.worst_where = value, where
    for g in groups.values():
        if g.out_of is not None and g.out_of < g.count:
            g.out_of = None  # a count the caller could not know (e.g. warnings from more runs than stored): say just N
    return list(groups.values())
