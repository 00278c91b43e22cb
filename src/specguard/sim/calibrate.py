"""``sim calibrate``: a ``LinearProfile`` fitted to a user's own ``specguard bench`` runs, and the profile file.

Each observed gap (``calibrate_steps``) is one equation gap = fixed + a x context tokens + b x batched tokens,
solved by non-negative least squares over every run together: baseline runs pin the per-token costs at
small batches, speculative runs add batched tokens at the same context, which separates a from b.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

import numpy as np
from pydantic import Field, ValidationError
from scipy.optimize import nnls

from specguard.errors import InputFileError, OutputExistsError, OutputWriteError, UsageError
from specguard.models_base import StrictModel
from specguard.results.store import write_json_atomic
from specguard.sim.calibrate_steps import F64, RunKind, RunSteps, run_steps
from specguard.sim.step_time import LinearProfile
from specguard.validation import describe, read_input_text

SIM_PROFILE_SCHEMA: Final = "specguard.sim_profile/1"
MIN_GAPS = 20
# Two filters keep only gaps of one step. calibrate_steps marks a gap inside which most other decoding requests
# got a chunk (a step end this request's stream skipped: the server's output loop grouped two steps' tokens);
# then a gap over 1.6x its fitted step or under 1/1.6 of it is dropped and the fit redone, three rounds (a
# two-step gap while one request runs alone has no other streams to mark it; a client read stall leaves a
# long gap and then short ones). fixed/a/b over the truth, on tests/unit/sim's synthetic runs (baseline +
# k=3, 11297 gaps):
#   10 % of chunks merged into the next: none 1.10/0.84/1.08 (median APE 9 %, R^2 0.81); residual only
#     0.99/1.10/1.10; marker only 1.005/0.91/1.00; both 1.000/1.000/1.000 (R^2 1.000, 1016 gaps dropped)
#   0.5 ms half-normal client jitter per chunk: none 1.00/1.13/1.00 (R^2 0.96); both 1.00/0.99/1.00 (R^2 0.995)
#   2 ms jitter: none 1.07/0.92/0.99; both 0.93/1.06/1.00 (median APE 6.5 %, 4555 gaps dropped)
# A "3x the request's median gap" rule would drop the legitimately long steps that carry a prefill, which
# are what pins the per-batched-token cost.
OUTLIER_RATIO = 1.6
ROUNDS = 3


class FitError(StrictModel):
    """Absolute percentage error of the fitted step against the observed gaps it was fitted to."""

    gaps: int
    median_ape: float
    p90_ape: float


class CalibratedRun(StrictModel):
    path: str
    kind: RunKind
    draft_tokens_per_step: float = Field(description="mean draft tokens per decode step (0 for a baseline run)")
    steps_used: int
    steps_dropped: int = Field(description="gaps left out as spanning several steps or cut short by the client")
    error: FitError


class CalibrationReport(StrictModel):
    profile: LinearProfile
    runs: list[CalibratedRun]
    error: FitError
    r2: float
    served_model: str
    server_version: str | None


class SimProfile(StrictModel):
    """The file ``sim calibrate`` writes and later ``sim`` commands read."""

    schema_version: Literal["specguard.sim_profile/1"] = SIM_PROFILE_SCHEMA
    profile: LinearProfile
    error: FitError
    r2: float
    source_runs: list[str] = Field(min_length=1)
    served_model: str
    server_version: str | None
    created: datetime


def _design(steps: RunSteps) -> F64:
    return np.column_stack([np.ones_like(steps.gap_s), steps.context_tokens, steps.batched_tokens])


def _nnls(x: F64, y: F64) -> F64:
    # columns differ by 10^4 (1 beside thousands of context tokens): scaled to unit norm, nnls converges cleanly
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(x / scale, y)
    return np.asarray(coef / scale, dtype=np.float64)


def _error(pred: F64, obs: F64) -> FitError:
    ape = np.abs(pred - obs) / obs
    return FitError(gaps=len(obs), median_ape=float(np.median(ape)), p90_ape=float(np.percentile(ape, 90)))


def _one(values: set[str | None], what: str, runs: Sequence[RunSteps]) -> str | None:
    known = {v for v in values if v is not None}
    if len(known) > 1:
        dirs = ", ".join(f"{r.path} ({getattr(r.info, what)})" for r in runs)
        raise UsageError(f"the runs differ in {what.replace('_', ' ')}: {dirs}; calibrate one deployment at a time")
    return next(iter(known), None)


def calibrate(run_dirs: Sequence[Path], min_gaps: int = MIN_GAPS) -> CalibrationReport:
    """The profile fitted to the runs' gaps, with its error per run and overall."""
    if not run_dirs:
        raise UsageError("calibration needs at least one run directory")
    runs = [run_steps(Path(d)) for d in run_dirs]
    model = _one({r.info.model for r in runs}, "model", runs) or ""
    version = _one({r.info.server_version for r in runs}, "server_version", runs)
    x = np.vstack([_design(r) for r in runs])
    y = np.concatenate([r.gap_s for r in runs])
    single = (y > 0) & ~np.concatenate([r.spans_steps for r in runs])
    keep = single
    if int(keep.sum()) < min_gaps:
        raise UsageError(f"only {int(keep.sum())} usable gaps between chunks in the runs; calibration needs {min_gaps}")
    coef = _nnls(x[keep], y[keep])
    for _ in range(ROUNDS):
        pred = x @ coef
        keep = single & (y <= pred * OUTLIER_RATIO) & (y * OUTLIER_RATIO >= pred)
        if int(keep.sum()) < min_gaps:
            raise UsageError(f"only {int(keep.sum())} gaps fit a single step; calibration needs {min_gaps}")
        coef = _nnls(x[keep], y[keep])
    pred = x @ coef
    resid = y[keep] - pred[keep]
    total = float(((y[keep] - y[keep].mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / total if total > 0 else 1.0
    out: list[CalibratedRun] = []
    start = 0
    for r in runs:
        sl = slice(start, start + len(r.gap_s))
        start += len(r.gap_s)
        k = keep[sl]
        used = int(k.sum())
        out.append(
            CalibratedRun(
                path=str(r.path),
                kind=r.kind,
                draft_tokens_per_step=r.draft_tokens_per_step,
                steps_used=used,
                steps_dropped=len(k) - used,
                error=_error(pred[sl][k], y[sl][k]) if used else FitError(gaps=0, median_ape=0.0, p90_ape=0.0),
            )
        )
    profile = LinearProfile(fixed_s=float(coef[0]), per_kv_token_s=float(coef[1]), per_batched_token_s=float(coef[2]))
    return CalibrationReport(
        profile=profile,
        runs=out,
        error=_error(pred[keep], y[keep]),
        r2=r2,
        served_model=model,
        server_version=version,
    )


def sim_profile(report: CalibrationReport, created: datetime | None = None) -> SimProfile:
    """The profile file's contents for a calibration."""
    return SimProfile(
        profile=report.profile,
        error=report.error,
        r2=report.r2,
        source_runs=[r.path for r in report.runs],
        served_model=report.served_model,
        server_version=report.server_version,
        created=created or datetime.now(UTC),
    )


def save_profile(path: Path, profile: SimProfile, force: bool = False) -> None:
    """Write the profile file; an existing file is replaced only with ``force``."""
    if path.exists() and not force:
        raise OutputExistsError(f"{path}: already exists; pass --force to replace it")
    try:
        write_json_atomic(path, profile)
    except OSError as exc:
        raise OutputWriteError(f"{path}: cannot write the sim profile: {exc}") from exc


def load_profile(path: Path) -> SimProfile:
    """A profile file, or an ``InputFileError`` naming the file and the key at fault."""
    text = read_input_text(path, "sim profile")
    try:
        version = json.loads(text).get("schema_version") if text.lstrip().startswith("{") else None
    except json.JSONDecodeError:
        version = None
    if version is not None and version != SIM_PROFILE_SCHEMA:
        raise InputFileError(f"{path}: key 'schema_version' is {version!r}; expected {SIM_PROFILE_SCHEMA!r}")
    try:
        return SimProfile.model_validate_json(text)
    except ValidationError as exc:
        raise InputFileError(f"{path}: not a specguard sim profile: {'; '.join(describe(exc)[:3])}") from exc
