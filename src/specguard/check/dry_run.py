"""``check PLAN --dry-run``: what a plan will send and how long it will take, before anything is sent. Pure.

An operator sizes a check before booking a GPU for it: per cell, the requests the objective and each
guardrail need at their percentiles (``check.requirements``), what the plan sends, the total, and the
wall time. The time is an estimate from the traffic levels alone: an open-loop level lasts
``num_requests / rate`` (or its ``duration_s``), whatever the server does; a closed loop (concurrency,
idle, burst) lasts as long as its requests take, which only a measurement knows, so it is estimated from
an assumed request time (``max_tokens`` x an assumed ITL, plus an assumed TTFT) that the output states.
Server start-up, warm-up and scrapes are not counted.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from specguard.analysis.compare import QUANTILES
from specguard.check.plan import CheckPlan, TrafficLevel
from specguard.check.requirements import plan_requirements, plan_warnings
from specguard.verdict.power import POWER, Effect, LevelSize, Spreads, level_size

__all__ = ["ASSUMED_ITL_MS", "ASSUMED_TTFT_MS", "DryRun", "LevelEstimate", "dry_run", "render_dry_run"]

# A guess for closed loops, stated in the output: a GPU server's decode step is 10 to 50 ms per token under load.
ASSUMED_ITL_MS = 30.0
ASSUMED_TTFT_MS = 200.0


class LevelEstimate(BaseModel):
    """One traffic level: requests per cell and run, what its cells need per arm, and one run's estimated seconds."""

    traffic: str
    per_run: int | None  # requests one run sends; None: bounded by duration only, unknown in advance
    planned: int | None  # per arm and cell, all repetitions
    objective: int
    guardrails: dict[str, int]
    run_s: float | None  # one run's estimated wall time; None when it cannot be estimated
    assumed: bool  # run_s rests on the assumed request time (closed loop)
    short: bool  # planned < needed: no GO possible from this level
    sized: LevelSize  # the requests per arm a GO needs here with 80 % power (``verdict.power``)
    sized_s: float | None  # the wall time of that many requests per arm, both measured arms, at this level's pace


class DryRun(BaseModel):
    plan: str
    cells_per_level: int  # sampling settings x prompt sources
    repetitions: int
    levels: list[LevelEstimate]
    arms_measured: int = 2  # 1 when the baseline is imported (--baseline-run): only the candidate sends
    total_requests: int | None  # the measured arms, every repetition and cell; None if some level has no count
    total_s: float | None
    assumed_request_s: float
    warnings: list[str]
    effect: Effect  # the assumed truth the sizing is for
    spreads: Spreads
    spreads_from: str  # "stated defaults" or the pilot's path and request count


def _per_run(t: TrafficLevel) -> int | None:
    if t.num_requests is not None:
        if t.duration_s is not None and t.rate is not None:
            return min(t.num_requests, math.ceil(t.rate * t.duration_s))
        return t.num_requests
    if t.duration_s is not None and t.rate is not None:
        return math.ceil(t.rate * t.duration_s)
    return None


def _run_seconds(t: TrafficLevel, per_run: int | None, request_s: float) -> tuple[float | None, bool]:
    """(seconds, whether the figure rests on the assumed request time)."""
    if t.rate is not None:  # open loop: the schedule fixes it, plus the last request's own time
        spans = [s for s in (t.duration_s, None if per_run is None else per_run / t.rate) if s is not None]
        return min(spans) + request_s, True
    in_flight = t.concurrency or t.burst or 1
    if per_run is None:
        return t.duration_s, False  # a closed loop bounded by duration lasts that long
    return math.ceil(per_run / in_flight) * request_s, True


def dry_run(
    plan: CheckPlan,
    baseline_imported: bool = False,
    effect: Effect | None = None,
    spreads: Spreads | None = None,
    spreads_from: str = "stated defaults",
) -> DryRun:
    """What ``check`` would send for ``plan``, per traffic level, with the totals, the time estimate and the sizing.

    ``baseline_imported``: the baseline comes from existing runs (``--baseline-run``), so only the candidate sends.
    ``effect``: the assumed truth of the sizing (default: the objective at twice its minimum improvement, the
    guardrails unchanged); ``spreads``: per-request log-spreads (default: ``Spreads()``, the CPU demo's).
    """
    effect = effect or Effect(objective_gain=min(2 * plan.objective.min_improvement, 0.95))
    spreads = spreads or Spreads()
    g = plan.guardrails
    budgets = (g.max_p99_e2e_regression, g.max_p99_ttft_regression)
    request_s = (ASSUMED_TTFT_MS + plan.max_tokens * ASSUMED_ITL_MS) / 1000
    cells = len(plan.sampling) * len(plan.prompts)
    levels = []
    for t, req in zip(plan.levels, plan_requirements(plan), strict=True):
        per_run = _per_run(t)
        run_s, assumed = _run_seconds(t, per_run, request_s)
        sized = level_size(
            t.name,
            cells,
            t.target,
            len(plan.levels),
            effect,
            plan.objective.min_improvement,
            budgets,
            spreads,
            QUANTILES[plan.objective.percentile],
            plan.statistics.min_tail_samples,
        )
        arms_sending = 1 if baseline_imported else 2
        sized_s = None if run_s is None or not per_run else sized.per_cell / per_run * run_s * cells * arms_sending
        levels.append(
            LevelEstimate(
                traffic=t.name,
                per_run=per_run,
                planned=req.planned,
                objective=req.objective,
                guardrails=req.guardrails,
                run_s=run_s,
                assumed=assumed,
                short=req.planned is not None and req.planned < req.needed,
                sized=sized,
                sized_s=sized_s,
            )
        )
    arms = 1 if baseline_imported else 2
    runs_per_level = arms * plan.repetitions * cells
    counts = [lv.per_run for lv in levels]
    times = [lv.run_s for lv in levels]
    total_requests = None if None in counts else sum(c * runs_per_level for c in counts if c is not None)
    total_s = None if None in times else sum(s * runs_per_level for s in times if s is not None)
    return DryRun(
        plan=plan.name,
        cells_per_level=cells,
        repetitions=plan.repetitions,
        levels=levels,
        arms_measured=arms,
        total_requests=total_requests,
        total_s=total_s,
        assumed_request_s=request_s,
        warnings=plan_warnings(plan) + _sizing_warnings(levels),
        effect=effect,
        spreads=spreads,
        spreads_from=spreads_from,
    )


def _sizing_warnings(levels: list[LevelEstimate]) -> list[str]:
    return [
        f"level '{lv.traffic}' sends {lv.planned} requests per arm and cell, fewer than the {lv.sized.per_cell} a GO "
        f"needs there with {POWER:.0%} power: expect INCONCLUSIVE unless the effect is larger than assumed".replace("%", " %")
        for lv in levels
        if lv.planned is not None and lv.planned < lv.sized.per_cell
    ]


def _duration(s: float | None) -> str:
    if s is None:
        return "unknown"
    m, sec = divmod(round(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def render_dry_run(d: DryRun, sampling: list[str], prompts: int) -> list[str]:
    """The dry run as lines for the terminal: one per cell, then the totals, the assumption and the warnings."""
    lines = [f"dry run of '{d.plan}': nothing is sent. Requests per arm and cell (all {d.repetitions} repetitions):"]
    for lv in d.levels:
        needs = ", ".join(f"{k} {v}" for k, v in ({"objective": lv.objective} | lv.guardrails).items())
        planned = "unknown (duration-bounded)" if lv.planned is None else str(lv.planned)
        flag = "  <- too few for GO" if lv.short else ""
        run = _duration(lv.run_s) + (" (assumed request time)" if lv.assumed and lv.run_s is not None else "")
        for s in sampling:
            for i in range(prompts):
                lines.append(f"  {lv.traffic} / {s} / prompts[{i}]: sends {planned}; needs {needs}; one run {run}{flag}")
    total = "unknown" if d.total_requests is None else str(d.total_requests)
    over = "both arms" if d.arms_measured == 2 else "the candidate (the baseline is imported, not measured)"
    lines.append(f"total: {total} requests over {over}; estimated wall time {_duration(d.total_s)}")
    lines.append(
        f"estimate: open-loop levels last requests/rate; closed loops assume {d.assumed_request_s:g} s per request "
        f"({ASSUMED_TTFT_MS:g} ms TTFT + max_tokens x {ASSUMED_ITL_MS:g} ms ITL); server start-up and warm-up not counted"
    )
    e, sp = d.effect, d.spreads
    lines.append(
        f"sizing: a GO with {POWER:.0%} power, if the objective is truly {e.objective_gain:.0%} better and "
        f"P99 E2E x{e.e2e_ratio:g}, P99 TTFT x{e.ttft_ratio:g}; per-request log-spreads objective "
        f"{sp.objective:.2f}, E2E {sp.e2e:.2f}, TTFT {sp.ttft:.2f} ({d.spreads_from}):".replace("%", " %")
    )
    for lv in d.levels:
        sz = lv.sized
        lines.append(
            f"  {lv.traffic}: {sz.requests_per_arm} requests per arm ({sz.per_cell} per cell; set by {sz.limited_by}), "
            f"about {_duration(lv.sized_s)} at this level's pace"
        )
    lines.extend(f"warning: {w}" for w in d.warnings)
    return lines
