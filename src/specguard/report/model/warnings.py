"""Warnings grouped by kind, as the reports show them (``report.build.warning_groups`` groups them)."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["WarningGroup"]


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
