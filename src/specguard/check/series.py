"""The report's chart series, from a check's stored runs: the one place a report reads run directories.

Acceptance per position is averaged here over repetitions and prompt sources,
so the renderers only draw what they are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specguard.analysis.compare import metric_values
from specguard.analysis.definitions import HIGHER_IS_BETTER
from specguard.analysis.gpu_usage import gpu_usage
from specguard.check.plan import CheckPlan
from specguard.report.model.data import (
    AcceptanceBars,
    ArmDistribution,
    Charts,
    Ecdf,
    GaugeTrace,
    GpuPanel,
    GpuTrace,
    LoadSeries,
)
from specguard.results.check_dir import ARMS, CheckDir, cell_key
from specguard.results.run_dir import load_gpu_samples, load_run, load_summary
from specguard.verdict import CellComparison, crossover_brackets

MAX_ITL_POINTS = 20000  # more per-token values only make the report's data heavier
ECDF_BODY_POINTS = 600  # evenly spaced ranks: enough for a smooth body on a 1300-px-wide page
ECDF_TAIL = 0.01  # every value of the top 1 % is drawn: the tail is what a box plot's whiskers flattened


def _cell_runs(plan: CheckPlan, d: CheckDir, arm: str, traffic: str, sampling: str) -> list[Path]:
    """Every stored run of one arm at one traffic level and sampling setting: all prompt sources, all repetitions."""
    keys = [cell_key(traffic, sampling, i) for i in range(len(plan.prompts))]
    return [run for key in keys for run in d.measured_runs(arm, key, plan.repetitions)]


def load_series(plan: CheckPlan, cells: Sequence[CellComparison]) -> list[LoadSeries]:
    order = {t.name: t.offered_load for t in plan.levels}
    out = []
    for sampling, segment in sorted({(c.sampling, c.segment) for c in cells}):
        group = sorted((c for c in cells if (c.sampling, c.segment) == (sampling, segment)), key=lambda c: order[c.traffic])
        x = [f"{c.traffic} ({order[c.traffic]:g})" for c in group]
        for arm in ARMS:
            out.append(
                LoadSeries(
                    arm=arm,
                    sampling=sampling,
                    segment=segment,
                    x=x,
                    objective=[getattr(c.objective, arm) for c in group],
                    p99_e2e=[getattr(c.p99_e2e, arm) for c in group],
                    load=[order[c.traffic] for c in group],
                    traffic=[c.traffic for c in group],
                    objective_ci=[getattr(c.objective, f"{arm}_ci") for c in group],
                    p99_e2e_ci=[getattr(c.p99_e2e, f"{arm}_ci") for c in group],
                )
            )
    return out


def ecdf(values: Sequence[float]) -> Ecdf | None:
    """The empirical CDF of ``values`` thinned for drawing, with p50/p95/p99 (numpy's linear rule, as the summaries)."""
    v = np.sort(np.asarray([x for x in values if np.isfinite(x)], dtype=float))
    n = len(v)
    if n == 0:
        return None
    body = np.linspace(0, n - 1, min(n, ECDF_BODY_POINTS)).round().astype(int)
    tail = np.arange(min(int(n * (1 - ECDF_TAIL)), n - 1), n)
    idx = np.unique(np.concatenate([body, tail]))
    p50, p95, p99 = (float(x) for x in np.percentile(v, [50, 95, 99]))
    return Ecdf(x=v[idx].tolist(), y=((idx + 1) / n).tolist(), n=n, p50=p50, p95=p95, p99=p99)


def distributions(plan: CheckPlan, d: CheckDir, target: str) -> list[ArmDistribution]:
    out = []
    for arm in ARMS:
        itl: list[float] = []
        tpot: list[float] = []
        for s in plan.sampling:
            for run in _cell_runs(plan, d, arm, target, s.name):
                records = load_run(run)[1]
                itl += [x for r in metric_values(records, "itl_ms") for x in r]
                tpot += [x for r in metric_values(records, "tpot_ms") for x in r]
        out.append(ArmDistribution(arm=arm, itl_ms=itl[:MAX_ITL_POINTS], tpot_ms=tpot, itl_ecdf=ecdf(itl), tpot_ecdf=ecdf(tpot)))
    return out


def acceptance(plan: CheckPlan, d: CheckDir) -> list[AcceptanceBars]:
    """The candidate's per-position acceptance, the mean over its runs, per traffic level x sampling setting."""
    out = []
    for t in plan.levels:
        for s in plan.sampling:
            per_pos: list[list[float]] = []
            for run in _cell_runs(plan, d, "candidate", t.name, s.name):
                acc = load_summary(run).acceptance
                if acc is not None and acc.per_position:
                    per_pos.append(acc.per_position)
            if per_pos:
                k = min(len(p) for p in per_pos)
                mean = [sum(p[j] for p in per_pos) / len(per_pos) for j in range(k)]
                out.append(AcceptanceBars(name=f"{t.name} / {s.name}", per_position=mean))
    return out


def gauges(plan: CheckPlan, d: CheckDir, target: str) -> list[GaugeTrace]:
    """KV-cache usage and waiting requests over time, first measured repetition of the target level's first cell."""
    out = []
    for arm in ARMS:
        runs = d.measured_runs(arm, cell_key(target, plan.sampling[0].name, 0), plan.repetitions)
        if not runs:
            continue
        samples = [s for s in load_run(runs[0])[2] if s.ok]
        out.append(
            GaugeTrace(
                arm=arm,
                t_s=[s.t_s for s in samples],
                kv_cache_usage=[s.gauges.get("kv_cache_usage") for s in samples],
                requests_waiting=[s.gauges.get("requests_waiting") for s in samples],
            )
        )
    return out


def gpu_panels(plan: CheckPlan, d: CheckDir, target: str) -> list[GpuPanel]:
    """Per arm, its GPUs' utilisation and memory over time and their figures, in the run the gauges chart shows (or why
    there are none)."""
    out = []
    for arm in ARMS:
        runs = d.measured_runs(arm, cell_key(target, plan.sampling[0].name, 0), plan.repetitions)
        samples = load_gpu_samples(runs[0]) if runs else []
        if not samples:
            continue
        good = [s for s in samples if s.ok]
        traces: dict[str, GpuTrace] = {}
        for s in good:
            for g in s.gpus:
                trace = traces.setdefault(g.gpu, GpuTrace(arm=arm, gpu=g.gpu, t_s=[], utilization_pct=[], memory_used_mib=[]))
                trace.t_s.append(s.t_s)
                trace.utilization_pct.append(g.utilization_pct)
                trace.memory_used_mib.append(g.memory_used_mib)
        reason = None if good else next((s.error for s in samples if s.error), "no GPU sample succeeded")
        out.append(GpuPanel(arm=arm, traces=list(traces.values()), reason=reason, usage=gpu_usage(samples)))
    return out


def charts(plan: CheckPlan, out: Path, cells: Sequence[CellComparison]) -> Charts:
    d = CheckDir(out)
    target = next(t for t in plan.levels if t.target).name
    return Charts(
        objective_title=f"{plan.objective.percentile} {plan.objective.metric}",
        load_series=load_series(plan, cells),
        target=target,
        distributions=distributions(plan, d, target),
        acceptance=acceptance(plan, d),
        gauges=gauges(plan, d, target),
        gpu=gpu_panels(plan, d, target),
        crossovers=crossover_brackets(cells, plan.objective.metric in HIGHER_IS_BETTER),
        rate_levels=[t.name for t in plan.levels if t.rate is not None],
    )
