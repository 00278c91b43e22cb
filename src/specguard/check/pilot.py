"""``check --dry-run --pilot DIR``: a deployment's own per-request spreads, for sizing by power.

A pilot is a ``bench`` run directory or a check directory (its baseline arm's runs). Each metric's
spread is the sd of log(value) over the successful requests of one run, pooled over the runs (weighted
by their degrees of freedom), so that a difference between cells (a longer prompt set, a busier level)
does not count as noise. A per-token metric (ITL) takes each request's median gap.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from specguard.analysis.compare import metric_values
from specguard.results.check_dir import CheckDir
from specguard.results.run_dir import RunDir, load_run
from specguard.results.store import RunDirError
from specguard.verdict.power import Spreads

__all__ = ["LATENCY_METRICS", "pilot_runs", "pilot_spreads"]

LATENCY_METRICS = ("itl_ms", "tpot_ms", "ttft_ms", "e2e_ms")  # the per-request metrics metric_values reads


def pilot_runs(path: Path) -> list[Path]:
    """The run directories of a pilot: the directory itself if it is a run, else a check's baseline runs."""
    if RunDir(path).is_run():
        return [path]
    runs = CheckDir(path).arm_runs("baseline") if path.is_dir() else []
    if not runs:
        raise RunDirError(f"{path}: --pilot expects a run directory (with {RunDir.RUN}) or a check directory with baseline runs")
    return runs


def _pooled_log_sd(groups: list[np.ndarray]) -> float | None:
    num = sum(float(np.var(np.log(g), ddof=1)) * (len(g) - 1) for g in groups if len(g) > 1)
    dof = sum(len(g) - 1 for g in groups if len(g) > 1)
    return math.sqrt(num / dof) if dof > 0 else None


def pilot_spreads(path: Path, objective_metric: str) -> tuple[Spreads, int]:
    """(the spreads of ``objective_metric``, E2E and TTFT, the successful requests they rest on)."""
    latency = objective_metric in LATENCY_METRICS  # a rate objective (tokens/s, goodput) keeps the stated default
    names = ["e2e_ms", "ttft_ms"] + ([objective_metric] if latency else [])
    per_metric: dict[str, list[np.ndarray]] = {m: [] for m in names}
    requests = 0
    for run in pilot_runs(path):
        _, records, _ = load_run(run)
        requests += sum(r.ok for r in records)
        for metric, groups in per_metric.items():
            values = np.array([float(np.median(v)) for v in metric_values(records, metric) if v], dtype=float)
            values = values[values > 0]
            if len(values):
                groups.append(values)
    sds = {m: _pooled_log_sd(g) for m, g in per_metric.items()}
    missing = [m for m, s in sds.items() if s is None]
    if missing:
        raise RunDirError(f"{path}: the pilot has too few successful requests to measure the spread of {', '.join(missing)}")
    objective = sds[objective_metric] if latency else Spreads().objective
    return Spreads(objective=objective or 0.0, e2e=sds["e2e_ms"] or 0.0, ttft=sds["ttft_ms"] or 0.0), requests
