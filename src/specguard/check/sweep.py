"""A load sweep that finds the crossover: which rates a ``traffic: {sweep: ...}`` plan measures, and why. Pure.

As GuideLLM's ``sweep`` profile does, the sweep first measures the baseline
one request at a time (``sync``: concurrency 1) and saturated (``saturate``:
``max_concurrency`` requests in flight, GuideLLM's "throughput"), then
``rates`` request rates evenly spaced strictly between the two rates the
baseline reached there. Every stage is measured on both arms (the same
levels, the same repetitions), so each rate is an A/B comparison. Then it
bisects: between the last rate where speculation still paid (every
sampling x segment cell's objective interval on the better side of no change)
and the first rate above it where it did not, it measures the midpoint, for
``bisect_steps`` steps. The crossover is named as that bracket, [last paid,
first not paid] in requests/s: an interval, not a point.

The target (where the objective must improve for a GO) is ``target_rate`` when
the plan names one, the operator's production rate, measured as a level of its
own; without it, the one-at-a-time level. The guardrails hold at every rate,
as they do for a list of levels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from specguard.models_base import FiniteModel

__all__ = [
    "SweepLevel",
    "SweepRecord",
    "SweepSpec",
    "SweepStage",
    "bracket",
    "between_rates",
    "next_stage",
    "sweep_levels",
]

SYNC = "sync"
SATURATE = "saturate"


class SweepSpec(FiniteModel):
    """``traffic: {sweep: {...}}``: how the sweep chooses its rates."""

    num_requests: int = Field(default=64, gt=0, description="requests per level, every stage alike")
    max_concurrency: int = Field(default=32, ge=2, description="requests in flight in the saturating stage")
    rates: int = Field(default=4, ge=1, description="rates evenly spaced between one-at-a-time and saturated")
    arrival: Literal["poisson", "constant"] = "poisson"
    bisect_steps: int = Field(default=2, ge=0, description="bisections of the crossover's bracket")
    target_rate: float | None = Field(
        default=None, gt=0, description="requests/s where the objective must improve (default: the one-at-a-time level)"
    )


class TrafficSweep(FiniteModel):
    sweep: SweepSpec


class SweepLevel(BaseModel):
    """One level a sweep chose: a concurrency (the two probes) or a rate; ``load_rps`` orders it by requests/s."""

    name: str
    rate: float | None = None
    concurrency: int | None = None
    arrival: Literal["poisson", "constant"] = "poisson"
    num_requests: int
    target: bool = False
    load_rps: float | None = Field(default=None, description="the rate, or for a probe the baseline's measured requests/s")


class SweepStage(BaseModel):
    name: str
    reason: str
    levels: list[SweepLevel]


class SweepRecord(BaseModel):
    """The sweep's stages so far, in check-state.json and check.json: which rates were chosen and why."""

    stages: list[SweepStage] = Field(default_factory=list)
    finished: bool = False
    note: str | None = Field(default=None, description="why the sweep ended where it did")

    @property
    def levels(self) -> list[SweepLevel]:
        return [lv for s in self.stages for lv in s.levels]


def probe_stage(spec: SweepSpec) -> SweepStage:
    n = spec.num_requests
    return SweepStage(
        name="probe",
        reason=f"one request at a time and {spec.max_concurrency} in flight, to find the rates the baseline reaches",
        levels=[
            SweepLevel(name=SYNC, concurrency=1, num_requests=n, target=spec.target_rate is None),
            SweepLevel(name=SATURATE, concurrency=spec.max_concurrency, num_requests=n),
        ],
    )


def between_rates(low: float, high: float, k: int) -> list[float]:
    """``k`` rates evenly spaced strictly between ``low`` and ``high`` (none when high <= low)."""
    if high <= low:
        return []
    step = (high - low) / (k + 1)
    return [low + step * i for i in range(1, k + 1)]


def _rate_level(spec: SweepSpec, name: str, rate: float, target: bool = False) -> SweepLevel:
    return SweepLevel(name=name, rate=rate, arrival=spec.arrival, num_requests=spec.num_requests, target=target, load_rps=rate)


def rates_stage(spec: SweepSpec, sync_rps: float, max_rps: float) -> SweepStage:
    rates = between_rates(sync_rps, max_rps, spec.rates)
    levels = [_rate_level(spec, f"rate-{i}", r) for i, r in enumerate(rates, start=1)]
    why = f"{len(rates)} rates evenly between {sync_rps:.3g} (one at a time) and {max_rps:.3g} requests/s (saturated)"
    if not rates:
        why = f"the saturated rate {max_rps:.3g} is not above the one-at-a-time rate {sync_rps:.3g}: no rates between"
    if spec.target_rate is not None:
        levels.append(_rate_level(spec, "target", spec.target_rate, target=True))
        why += f"; the target rate {spec.target_rate:g} requests/s"
    return SweepStage(name="rates", reason=why, levels=levels)


def bracket(levels: Sequence[SweepLevel], paid: Mapping[str, bool]) -> tuple[SweepLevel, SweepLevel] | None:
    """(last level where speculation paid, the first level above it where it did not), by requests/s; None if none."""
    ordered = sorted((lv for lv in levels if lv.load_rps is not None and lv.name in paid), key=lambda lv: lv.load_rps or 0.0)
    for lo, hi in zip(ordered, ordered[1:], strict=False):
        if paid[lo.name] and not paid[hi.name]:
            return lo, hi
    return None


def next_stage(spec: SweepSpec, record: SweepRecord, paid: Mapping[str, bool]) -> SweepStage | str:
    """The next stage to measure, or why the sweep ends (a sentence); ``record``'s stages are all measured.

    ``paid`` says, per measured level name, whether speculation paid there (needed for bisection only); the
    probes' ``load_rps`` must be filled in before the rates stage is chosen.
    """
    names = [s.name for s in record.stages]
    if not names:
        return probe_stage(spec)
    if "rates" not in names:
        probe = {lv.name: lv for lv in record.stages[0].levels}
        sync, sat = probe[SYNC].load_rps, probe[SATURATE].load_rps
        assert sync is not None and sat is not None, "the probes' measured rates come first"
        return rates_stage(spec, sync, sat)
    steps = sum(n.startswith("bisect-") for n in names)
    found = bracket(record.levels, paid)
    if found is None:
        measured = [paid[lv.name] for lv in record.levels if lv.name in paid]
        if measured and all(measured):
            return "no crossover: speculation paid at every measured rate"
        if not any(measured):
            return "no crossover: speculation paid at no measured rate"
        return "no crossover: no rate where speculation paid is followed by a higher one where it did not"
    lo, hi = found
    assert lo.load_rps is not None and hi.load_rps is not None
    if steps >= spec.bisect_steps:
        return (
            f"crossover bracketed after {steps} bisection step(s): between {lo.load_rps:.3g} requests/s "
            f"('{lo.name}', paid) and {hi.load_rps:.3g} ('{hi.name}', did not)"
        )
    mid = (lo.load_rps + hi.load_rps) / 2
    return SweepStage(
        name=f"bisect-{steps + 1}",
        reason=f"bisect between '{lo.name}' ({lo.load_rps:.3g} requests/s, paid) and '{hi.name}' ({hi.load_rps:.3g}, did not)",
        levels=[_rate_level(spec, f"bisect-{steps + 1}", mid)],
    )


def sweep_levels(record: SweepRecord | None, spec: SweepSpec) -> list[SweepLevel]:
    """The levels measured so far (the probe stage's alone before anything ran)."""
    if record is None or not record.stages:
        return probe_stage(spec).levels
    return record.levels
