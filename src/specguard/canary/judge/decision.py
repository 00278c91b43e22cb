"""The rollout rule: from the current step, the windows so far and critical events, the next move. Pure.

``decide`` is a state machine without state of its own: everything it needs comes in (the controller keeps
it in SQLite), so the same inputs after a restart give the same decision. Its moves:

* ``rollback``: at once on one critical condition (OOM or crash of a candidate server, a 5xx burst, a
  stream-error burst), or after ``windows_to_rollback`` consecutive FAILing windows.
* ``advance``: to the next step once this step has run its minimum time and requests and its last
  ``windows_to_promote`` windows PASSed; ``promote`` instead of advancing when the step is the last
  (100 %). At 100 % every request is the candidate's and no baseline is left to compare with, so that
  step's windows cannot PASS: it is a bake time, promoted after its minimum time and requests unless a
  critical condition (or a failing gauge) rolls it back first.
* ``hold``: anything else.

"Consecutive" counts the windows that carry a verdict: an INCONCLUSIVE window (too little traffic) adds
nothing to either run and breaks neither, so it never promotes, never rolls back, and no-data windows
between two failures cannot wash a regression out. Failing runs span steps (a regression right after an
advance still counts the failure before it); passing runs count only the current step's windows, since
each step must earn its own promotion at its own weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from specguard.canary.judge.window import MetricResult, WindowVerdict
from specguard.models_base import FiniteModel, StrictModel

DecisionKind = Literal["hold", "advance", "promote", "rollback"]
CriticalKind = Literal["oom", "crash", "http_5xx_burst", "stream_error_burst"]
CanaryReasonCode = Literal[
    "critical_oom",
    "critical_crash",
    "critical_5xx_burst",
    "critical_stream_error_burst",
    "windows_failed",
    "metric_failed",
    "windows_passed",
    "step_time_short",
    "step_requests_short",
    "windows_pass_short",
    "window_inconclusive",
    "window_failed_once",
    "promoted",
    "paused",
    "manual_promote",
    "manual_rollback",
]

_CRITICAL_CODE: dict[CriticalKind, CanaryReasonCode] = {
    "oom": "critical_oom",
    "crash": "critical_crash",
    "http_5xx_burst": "critical_5xx_burst",
    "stream_error_burst": "critical_stream_error_burst",
}


class StepRule(FiniteModel):
    """One step of the rollout: the candidate's share of traffic and what it must run before it may advance."""

    percent: float = Field(gt=0, le=100)
    min_seconds: float = Field(default=300, ge=0)
    min_requests: int = Field(default=200, ge=0)


def _default_steps() -> list[StepRule]:
    return [StepRule(percent=p) for p in (1, 5, 10, 25, 50, 100)]


class RolloutRule(FiniteModel):
    """What the decision needs of the rollout file: steps and the runs of windows that move it."""

    steps: list[StepRule] = Field(default_factory=_default_steps)
    windows_to_rollback: int = Field(default=2, ge=1)
    windows_to_promote: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _rising_to_full(self) -> RolloutRule:
        percents = [s.percent for s in self.steps]
        if not percents or percents[-1] != 100:
            raise ValueError("the last step must be 100 %: promotion happens there")
        if any(a >= b for a, b in zip(percents, percents[1:])):
            raise ValueError(f"steps must rise strictly, got {percents}")
        return self


class WindowRecord(StrictModel):
    """A finished window as the controller keeps it: its step, its verdict, and the failing results behind it."""

    step: int = Field(ge=0)
    verdict: WindowVerdict
    failures: list[MetricResult] = []  # the FAILing results of the window's analysis
    why_inconclusive: str = ""  # an INCONCLUSIVE window's first undecided result, in words: the true cause of a hold


class CriticalEvent(StrictModel):
    kind: CriticalKind
    server: str | None = None
    count: int | None = None  # for bursts: how many 5xx or stream errors
    threshold: int | None = None
    detail: str = ""


class StepProgress(FiniteModel):
    step: int = Field(ge=0)
    seconds_in_step: float = Field(ge=0)
    requests_in_step: int = Field(ge=0)  # candidate requests at this step


class CanaryReason(BaseModel):
    """One reason, shaped as ``verdict.model.Reason``: a code and numbers for programs, the text for people."""

    code: CanaryReasonCode
    segment: str | None = None
    metric: str | None = None
    numbers: dict[str, float] = {}
    text: str


class Decision(BaseModel):
    kind: DecisionKind
    step: int  # the step after the decision (unchanged on hold and rollback)
    percent: float  # the candidate's share after the decision: 0 after a rollback
    reasons: list[CanaryReason]


def _critical_reason(event: CriticalEvent) -> CanaryReason:
    numbers = {k: float(v) for k, v in (("count", event.count), ("threshold", event.threshold)) if v is not None}
    where = f" on {event.server}" if event.server else ""
    detail = f": {event.detail}" if event.detail else ""
    return CanaryReason(code=_CRITICAL_CODE[event.kind], numbers=numbers, text=f"critical: {event.kind}{where}{detail}")


def trailing_run(windows: Sequence[WindowRecord], verdict: WindowVerdict) -> list[WindowRecord]:
    """The latest run of ``verdict`` windows, skipping INCONCLUSIVE ones (they neither extend nor break it)."""
    run: list[WindowRecord] = []
    for w in reversed(windows):
        if w.verdict == "INCONCLUSIVE":
            continue
        if w.verdict != verdict:
            break
        run.append(w)
    return run[::-1]


def _metric_reasons(run: Sequence[WindowRecord]) -> list[CanaryReason]:
    """The failing results of the latest failing window, one reason each."""
    reasons = []
    for r in run[-1].failures if run else []:
        numbers = {"threshold": r.threshold, "budget": r.budget}
        numbers |= {"n_baseline": float(r.n_baseline), "n_candidate": float(r.n_candidate)}
        if r.p_value is not None:
            numbers["p_value"] = r.p_value
        if r.ratio is not None:
            numbers |= {"ratio": r.ratio.ratio, "ci_low": r.ratio.ci_low, "ci_high": r.ratio.ci_high}
        reasons.append(CanaryReason(code="metric_failed", segment=r.segment, metric=r.metric, numbers=numbers, text=r.text))
    return reasons


def _full_step(rule: RolloutRule, progress: StepProgress) -> bool:
    """The last step at 100 %: all traffic is the candidate's, no baseline is left to compare with, so its
    windows cannot pass; the step is a bake time (its minimum time and requests, no critical condition)."""
    return progress.step == len(rule.steps) - 1 and rule.steps[progress.step].percent == 100


def decide(
    rule: RolloutRule,
    progress: StepProgress,
    windows: Sequence[WindowRecord],
    critical: Sequence[CriticalEvent] = (),
) -> Decision:
    """The next move after the latest window (or event), with its reasons."""
    if progress.step >= len(rule.steps):
        raise ValueError(f"step {progress.step} does not exist: the rollout has {len(rule.steps)} steps")
    step = rule.steps[progress.step]
    if critical:
        return Decision(kind="rollback", step=progress.step, percent=0.0, reasons=[_critical_reason(e) for e in critical])
    failing = trailing_run(windows, "FAIL")
    if len(failing) >= rule.windows_to_rollback:
        head = CanaryReason(
            code="windows_failed",
            numbers={"failed": float(len(failing)), "needed": float(rule.windows_to_rollback)},
            text=f"{len(failing)} consecutive failing windows (rollback after {rule.windows_to_rollback})",
        )
        return Decision(kind="rollback", step=progress.step, percent=0.0, reasons=[head, *_metric_reasons(failing)])
    reasons = _hold_reasons(rule, step, progress, windows, failing)
    if reasons:
        return Decision(kind="hold", step=progress.step, percent=step.percent, reasons=reasons)
    passed = CanaryReason(
        code="windows_passed",
        numbers={"passed": float(rule.windows_to_promote), "seconds": progress.seconds_in_step},
        text=f"{rule.windows_to_promote} consecutive passing windows at {step.percent:g} % after "
        f"{progress.seconds_in_step:g} s and {progress.requests_in_step} requests",
    )
    if _full_step(rule, progress):
        passed = CanaryReason(
            code="windows_passed",
            numbers={"seconds": progress.seconds_in_step, "requests": float(progress.requests_in_step)},
            text=f"baked at 100 % for {progress.seconds_in_step:.0f} s and {progress.requests_in_step} requests with no "
            "critical condition (no baseline traffic is left to compare with)",
        )
    if progress.step == len(rule.steps) - 1:
        done = CanaryReason(code="promoted", numbers={"percent": 100.0}, text="passed at 100 %: promoted")
        return Decision(kind="promote", step=progress.step, percent=100.0, reasons=[passed, done])
    nxt = rule.steps[progress.step + 1]
    return Decision(kind="advance", step=progress.step + 1, percent=nxt.percent, reasons=[passed])


def _hold_reasons(
    rule: RolloutRule,
    step: StepRule,
    progress: StepProgress,
    windows: Sequence[WindowRecord],
    failing: Sequence[WindowRecord],
) -> list[CanaryReason]:
    """Why the step may not advance yet; empty when it may."""
    reasons: list[CanaryReason] = []
    if failing:
        reasons.append(
            CanaryReason(
                code="window_failed_once",
                numbers={"failed": float(len(failing)), "needed": float(rule.windows_to_rollback)},
                text=f"{len(failing)} failing window(s), {rule.windows_to_rollback} roll back",
            )
        )
        reasons.extend(_metric_reasons(failing))
    if windows and windows[-1].verdict == "INCONCLUSIVE" and not _full_step(rule, progress):
        why = windows[-1].why_inconclusive or "too little traffic to judge"
        reasons.append(CanaryReason(code="window_inconclusive", text=f"the latest window could not be judged: {why}"))
    if progress.seconds_in_step < step.min_seconds:
        reasons.append(
            CanaryReason(
                code="step_time_short",
                numbers={"seconds": progress.seconds_in_step, "needed": step.min_seconds},
                text=f"{progress.seconds_in_step:g} s of {step.min_seconds:g} s at {step.percent:g} %",
            )
        )
    if progress.requests_in_step < step.min_requests:
        reasons.append(
            CanaryReason(
                code="step_requests_short",
                numbers={"requests": float(progress.requests_in_step), "needed": float(step.min_requests)},
                text=f"{progress.requests_in_step} of {step.min_requests} requests at {step.percent:g} %",
            )
        )
    passing = [w for w in trailing_run(windows, "PASS") if w.step == progress.step]
    if not failing and len(passing) < rule.windows_to_promote and not _full_step(rule, progress):
        reasons.append(
            CanaryReason(
                code="windows_pass_short",
                numbers={"passed": float(len(passing)), "needed": float(rule.windows_to_promote)},
                text=f"{len(passing)} of {rule.windows_to_promote} consecutive passing windows at this step",
            )
        )
    return reasons
