"""`specguard canary report STATE`: the canary's report.md and report.html, built with check's report machinery.

``build_canary_report_data`` is pure: the rollout's meta, the controller's state, the event log, the proxied
requests and the pools' inventories in, a finished ``CanaryReportData`` out (the caller reads those from the
SQLite store). It is the only place that computes anything a canary report shows: the plain-words summary,
the weight over time, per-pool percentiles (``analysis.percentiles``, the estimator ``bench`` uses) and the
per-window rows taken from the analyses the controller logged. ``write_canary_report`` renders and writes.

Numbers that are undefined (a ratio over an empty arm is NaN) become None here, so that the data, its JSON
and every rendered number show "-" and never "nan".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specguard.analysis.definitions import METRIC_DEFINITIONS
from specguard.analysis.percentiles import percentiles
from specguard.analysis.request_metrics import per_token_itl, tpot
from specguard.canary.judge.decision import CanaryReason, Decision
from specguard.canary.judge.histogram_judge import HISTOGRAM_DEFINITIONS
from specguard.canary.judge.window import MetricResult, WindowAnalysis
from specguard.canary.spec.rollout import Rollout
from specguard.canary.state.records import CanaryEvent, ControllerState, ProxiedRequest
from specguard.errors import OutputExistsError, OutputWriteError
from specguard.number_format import fmt, fmt_percent
from specguard.report.model.canary_data import (
    CanaryReportData,
    DecisionRow,
    HookRow,
    InventoryTable,
    MetricRow,
    PoolStats,
    WeightPoint,
    WindowRow,
)
from specguard.report.render.outputs import CANARY_OUTPUTS

__all__ = [
    "CANARY_DEFINITIONS",
    "build_canary_report_data",
    "metric_label",
    "pool_stats",
    "read_canary_report_data",
    "write_canary_report",
]

POOL_ORDER = ("baseline", "candidate", "control")
OUTPUT_TAIL = 2000  # characters of a hook's stdout / stderr kept: the end is where a failing command says why
TOP_ERRORS = 5

_METRIC_LABELS = {"itl_ms": "ITL", "ttft_ms": "TTFT", "e2e_ms": "E2E", "tpot_ms": "TPOT"}
_TIMELINE_KINDS = ("started", "decision", "critical", "manual", "stopped")

# The canary's own terms; the metrics themselves are worded once, in analysis/definitions.py.
CANARY_DEFINITIONS: dict[str, str] = {
    "ratio": "candidate / baseline of the window's percentile, for latencies (above 1: the candidate is slower); "
    "the error rate has none: its two rates are compared, its budget in points",
    "interval": "95 % percentile-bootstrap interval of the ratio, requests resampled within the window "
    "(per-token ITL resampled by request)",
    "p": "one-sided p-value for 'the candidate is worse': Mann-Whitney U on one value per request (the mean of "
    "its per-token values for ITL); van Elteren's stratified Wilcoxon for the stratified comparison; Fisher's "
    "exact test for the error rate",
    "threshold": "the p-value below which a test rejects at this look: the look's share of the rollout's alpha "
    "(alpha spending), split evenly over the look's tests (metrics x segments)",
    "verdict": "a metric FAILs only when its test rejects AND its point estimate is beyond the budget; it is "
    "INCONCLUSIVE with too few requests in either arm; a window FAILs when any metric of any segment fails",
    "comparison": "control: candidate against a control pool at the same load; stratified: within strata of "
    "the per-replica in-flight count at send time, the baseline subsampled to the candidate's load mix; "
    "naive: pools as they come (load differences can flatter the less loaded candidate)",
    "n": "requests per arm carrying the metric (stratified: the matched requests)",
    "pool percentiles": "over the whole rollout, every successful upstream attempt the proxy measured, "
    "linear interpolation between order statistics (as bench and vllm bench serve)",
}


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _num(x: Any) -> float | None:
    """A finite float, or None for a missing or undefined (NaN, infinite) one."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


_RATIO_FLOATS = ("baseline", "candidate", "ratio", "ci_low", "ci_high")


def _null_as_nan(ratio: Mapping[str, Any]) -> dict[str, Any]:
    """A RatioResult dump with JSON's null (pydantic writes NaN so) back as the NaN it stood for."""
    out = dict(ratio)
    for k in _RATIO_FLOATS:
        if out.get(k) is None:
            out[k] = math.nan
    for k in ("baseline_ci", "candidate_ci"):
        if isinstance(out.get(k), list):
            out[k] = [math.nan if x is None else x for x in out[k]]
    return out


def _window_analysis(raw: Mapping[str, Any]) -> WindowAnalysis:
    """The logged WindowAnalysis, whether its NaNs were stored as NaN or as null."""
    results = [{**r, "ratio": _null_as_nan(r["ratio"])} if isinstance(r.get("ratio"), Mapping) else r for r in raw["results"]]
    return WindowAnalysis.model_validate({**raw, "results": results})


def metric_label(metric: str) -> str:
    """``p99_itl_ms`` -> "p99 ITL"; ``error_rate`` -> "error rate"."""
    pct, _, name = metric.partition("_")
    if name in _METRIC_LABELS:
        return f"{pct} {_METRIC_LABELS[name]}"
    return metric.replace("_", " ")


def _budget_text(r: MetricResult) -> str:
    return f"+{r.budget * 100:g} points" if r.metric == "error_rate" else f"{r.budget * 100:g} %"


def _values_text(r: MetricResult) -> str:
    if r.metric == "error_rate":
        return f"{fmt_percent(_num(r.baseline_value), 2)} / {fmt_percent(_num(r.candidate_value), 2)}"
    return f"{fmt(_num(r.baseline_value))} / {fmt(_num(r.candidate_value))} ms"


def _metric_row(r: MetricResult) -> MetricRow:
    ratio = r.ratio
    return MetricRow(
        segment=r.segment,
        metric=r.metric,
        verdict=r.verdict,
        comparison=r.comparison,
        ratio=_num(ratio.ratio) if ratio else None,
        ci_low=_num(ratio.ci_low) if ratio else None,
        ci_high=_num(ratio.ci_high) if ratio else None,
        p_value=_num(r.p_value),
        threshold=r.threshold,
        budget=r.budget,
        budget_text=_budget_text(r),
        n_baseline=r.n_baseline,
        n_candidate=r.n_candidate,
        baseline_value=_num(r.baseline_value),
        candidate_value=_num(r.candidate_value),
        values_text=_values_text(r),
        text=r.text,
    )


def _window_row(event: CanaryEvent) -> WindowRow:
    d = event.details
    a = _window_analysis(d["analysis"])
    start, end = float(d.get("window_start_unix", event.time)), float(d.get("window_end_unix", event.time))
    gauges = {pool: {k: _num(v) for k, v in g.items()} for pool, g in (d.get("gauges") or {}).items()}
    return WindowRow(
        look=a.look,
        start_utc=_utc(start),
        end_utc=_utc(end),
        start_unix=start,
        end_unix=end,
        step=event.step + 1,
        percent=event.percent,
        verdict=a.verdict,
        comparison=a.comparison,
        alpha_look=a.alpha_look,
        counts={pool: int(n) for pool, n in (d.get("counts") or {}).items()},
        acceptance={pool: _num(v) for pool, v in (d.get("acceptance") or {}).items()},
        gauges=gauges,
        warnings=a.warnings,
        results=[_metric_row(r) for r in a.results],
    )


def _decision_of(event: CanaryEvent) -> Decision | None:
    raw = event.details.get("decision")
    return Decision.model_validate(raw) if isinstance(raw, Mapping) else None


def _decision_row(event: CanaryEvent) -> DecisionRow:
    reasons = list(event.reasons)
    decision = _decision_of(event)
    if not reasons and decision is not None:
        reasons = [r.text for r in decision.reasons]
    by = event.details.get("by")
    return DecisionRow(
        seq=event.seq,
        time_utc=_utc(event.time),
        kind=event.kind,
        decision=event.decision,
        step=event.step + 1,
        percent=event.percent,
        by=str(by) if by is not None else None,
        reasons=reasons,
    )


def _hook_row(event: CanaryEvent) -> HookRow:
    d = event.details
    exit_code = d.get("exit_code")
    timed_out = bool(d.get("timed_out", False))
    return HookRow(
        time_utc=_utc(event.time),
        phase=str(d.get("phase", "")),
        argv=[str(a) for a in d.get("argv", [])],
        attempt=int(d.get("attempt", 1)),
        exit_code=exit_code,
        timed_out=timed_out,
        duration_s=_num(d.get("duration_s")),
        failed=timed_out or exit_code != 0,
        stdout_tail=str(d.get("stdout", ""))[-OUTPUT_TAIL:],
        stderr_tail=str(d.get("stderr", ""))[-OUTPUT_TAIL:],
    )


def _weight(events: Sequence[CanaryEvent], state: ControllerState) -> list[WeightPoint]:
    points = [
        WeightPoint(
            time_unix=e.time,
            time_utc=_utc(e.time),
            time_iso=_iso(e.time),
            step=e.step + 1,
            percent=e.percent,
            cause=e.kind + (f" {e.decision}" if e.decision else ""),
        )
        for e in events
    ]
    if not points or state.updated_unix >= points[-1].time_unix:
        t = state.updated_unix
        points.append(
            WeightPoint(
                time_unix=t,
                time_utc=_utc(t),
                time_iso=_iso(t),
                step=state.step + 1,
                percent=state.percent,
                cause=f"state: {state.status}",
            )
        )
    return points


def _changes(points: Sequence[WeightPoint]) -> list[WeightPoint]:
    return [p for i, p in enumerate(points) if i == 0 or p.percent != points[i - 1].percent]


def pool_stats(pool: str, requests: Iterable[ProxiedRequest]) -> PoolStats:
    """One pool's counts, errors and TTFT / ITL / TPOT / E2E percentiles (ms) over the given attempts."""
    reqs = list(requests)
    failed = [r for r in reqs if not r.ok]
    ok = [r for r in reqs if r.ok]
    messages = Counter(r.error or (f"HTTP {r.http_status}" if r.http_status else "unknown error") for r in failed)
    itl = [v for r in ok for v in per_token_itl(r.chunk_times_s, r.chunk_tokens)]
    tpots = [v for r in ok if (v := tpot(r.ttft_s, r.e2e_s, r.output_tokens)) is not None]
    return PoolStats(
        pool=pool,
        attempts=len(reqs),
        client_requests=sum(not r.retried for r in reqs),
        errors=len(failed),
        error_rate=len(failed) / len(reqs) if reqs else None,
        retried=sum(r.retried for r in reqs),
        disconnected=sum(r.client_disconnected for r in reqs),
        errors_by_message=dict(messages.most_common(TOP_ERRORS)),
        ttft_ms=percentiles([r.ttft_s for r in ok if r.ttft_s is not None], scale=1000.0),
        itl_ms=percentiles(itl, scale=1000.0),
        tpot_ms=percentiles(tpots, scale=1000.0),
        e2e_ms=percentiles([r.e2e_s for r in ok if r.e2e_s is not None], scale=1000.0),
    )


def _pools(requests: Sequence[ProxiedRequest], rollout: Rollout) -> list[PoolStats]:
    named = ["baseline", "candidate"] + (["control"] if rollout.pools.control is not None else [])
    seen = named + sorted({r.pool for r in requests} - set(named), key=lambda p: (p not in POOL_ORDER, p))
    return [pool_stats(p, (r for r in requests if r.pool == p)) for p in seen]


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        if not value and prefix:
            return [(prefix, "{}")]
        return [row for k, v in value.items() for row in _flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list | tuple):
        return [(prefix, ", ".join(str(v) for v in value))]
    return [(prefix, "-" if value is None else str(value))]


def _ratio_phrase(reason: CanaryReason, multi_segment: bool) -> str:
    where = f" in {reason.segment}" if multi_segment and reason.segment else ""
    n = reason.numbers
    if reason.metric and "ratio" in n:
        label = metric_label(reason.metric)
        return f"{label}{where} {fmt(_num(n['ratio']))}x baseline [{fmt(_num(n.get('ci_low')))}, {fmt(_num(n.get('ci_high')))}]"
    return reason.text


def _rollback_summary(event: CanaryEvent | None, step_percents: Sequence[float], multi_segment: bool) -> str:
    if event is None:
        return "rolled back (the event log holds no rollback decision)"
    at = step_percents[event.step] if 0 <= event.step < len(step_percents) else event.percent
    head = f"rolled back at {at:g} %"
    decision = _decision_of(event)
    by = event.details.get("by")
    if event.kind == "manual" or decision is None or by:
        # An operator's rollback says so in the banner (issue 28: it read like the controller's own).
        why = f": {'; '.join(event.reasons)}" if event.reasons else ""
        return f"{head} by the operator{f' ({by})' if by else ''}{why}"
    critical = [r for r in decision.reasons if r.code.startswith("critical_")]
    if critical:
        return f"{head} on a critical condition: {'; '.join(r.text for r in critical)}"
    failed = next((r for r in decision.reasons if r.code == "windows_failed"), None)
    metrics = [_ratio_phrase(r, multi_segment) for r in decision.reasons if r.code == "metric_failed"]
    count = int(failed.numbers.get("failed", 0)) if failed else 0
    after = f" after {count} failing window{'s' if count != 1 else ''}" if count else ""
    return f"{head}{after}" + (f": {', '.join(metrics)}" if metrics else "")


def _summary(
    state: ControllerState,
    events: Sequence[CanaryEvent],
    windows: Sequence[WindowRow],
    hooks: Sequence[HookRow],
    step_percents: Sequence[float],
) -> str:
    multi_segment = len({r.segment for w in windows for r in w.results}) > 1
    moves = [e for e in events if e.kind in ("decision", "manual") and e.decision is not None]
    n = len(windows)
    if state.status == "rolled_back":
        text = _rollback_summary(
            next((e for e in reversed(moves) if e.decision == "rollback"), None), step_percents, multi_segment
        )
    elif state.status == "promoted":
        text = f"promoted to 100 % after {n} window{'s' if n != 1 else ''} over {len(step_percents)} steps"
    else:
        where = f"{state.percent:g} % (step {state.step + 1} of {len(step_percents)})"
        text = f"{state.status} at {where}, {n} window{'s' if n != 1 else ''} analysed"
        if windows:
            text += f", the latest {windows[-1].verdict}"
        last = next((e for e in reversed(moves) if e.kind == "decision"), None)
        if last is not None and last.decision == "hold" and last.reasons:
            text += f"; holding: {last.reasons[0]}"
    failed = sum(h.failed for h in hooks)
    if failed:
        text += f"; {failed} hook run{'s' if failed != 1 else ''} FAILED"
    return text


def _error_control(windows: Sequence[CanaryEvent], rollout: Rollout) -> str:
    if windows:
        return str(windows[-1].details["analysis"]["error_control"])
    return (
        "No window has been analysed yet. The rollout bounds false rollbacks over the whole rollout, not per "
        f"window, at {rollout.analysis.false_rollback_rate:g}."
    )


def build_canary_report_data(
    meta: Mapping[str, Any],
    state: ControllerState,
    events: Sequence[CanaryEvent],
    requests: Sequence[ProxiedRequest],
    inventories: Mapping[str, Mapping[str, Any]],
) -> CanaryReportData:
    """Everything the canary report shows, computed once. ``meta`` holds rollout_name, rollout (a dump), created_unix."""
    rollout = Rollout.model_validate(meta["rollout"])
    ordered = sorted(events, key=lambda e: e.seq)
    window_events = [e for e in ordered if e.kind == "window"]
    windows = [_window_row(e) for e in window_events]
    hooks = [_hook_row(e) for e in ordered if e.kind == "hook"]
    step_percents = [s.percent for s in rollout.steps]
    weight = _weight(ordered, state)
    metric_keys = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "error_rate")
    return CanaryReportData(
        rollout_name=str(meta.get("rollout_name", rollout.name)),
        status=state.status,
        step=state.step + 1,
        steps=len(step_percents),
        percent=state.percent,
        step_percents=step_percents,
        created_utc=_utc(float(meta["created_unix"])),
        updated_utc=_utc(state.updated_unix),
        summary=_summary(state, ordered, windows, hooks, step_percents),
        weight=weight,
        weight_changes=_changes(weight),
        windows=windows,
        decisions=[_decision_row(e) for e in ordered if e.kind in _TIMELINE_KINDS],
        hooks=hooks,
        failed_hooks=sum(h.failed for h in hooks),
        pools=_pools(requests, rollout),
        inventories=[InventoryTable(name=name, rows=_flatten(inv)) for name, inv in inventories.items()],
        error_control=_error_control(window_events, rollout),
        definitions={
            **{k: METRIC_DEFINITIONS[k] for k in metric_keys},
            **CANARY_DEFINITIONS,
            # behind HAProxy or a Gateway the windows were judged on the servers' histograms: say how
            **(HISTOGRAM_DEFINITIONS if _server_side(window_events) else {}),
        },
    )


def _server_side(windows: Sequence[CanaryEvent]) -> bool:
    return any(w.details.get("analysis", {}).get("source") == "server_histograms" for w in windows)


def write_canary_report(data: CanaryReportData, out_dir: Path, force: bool = False) -> list[Path]:
    """report.html and report.md in ``out_dir``; existing ones are replaced only with ``force``."""
    existing = [p.name for p in CANARY_OUTPUTS.paths(out_dir) if p.exists()]
    if existing and not force:
        raise OutputExistsError(f"{out_dir}: {', '.join(existing)} already exist; pass --force to rebuild them")
    texts = CANARY_OUTPUTS.render(data, out_dir)  # report.html, report.md: every registered format
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for path, text in texts.items():
            path.write_text(text)
    except OSError as exc:
        raise OutputWriteError(f"{out_dir}: cannot write the canary report ({exc.strerror or exc})") from exc
    return list(texts)


def read_canary_report_data(state_path: Path) -> CanaryReportData:
    """The report data of a state file (read-only; a running controller may go on writing it)."""
    from specguard.canary.state.store import CanaryStateError, CanaryStore

    with CanaryStore.open_existing(state_path) as store:
        state = store.load_state()
        if state is None:
            raise CanaryStateError(f"{state_path}: the canary has not started yet (no state saved)")
        meta = store.meta()
        doc = {"rollout_name": meta.rollout_name, "rollout": meta.rollout, "created_unix": meta.created_unix}
        return build_canary_report_data(doc, state, store.events(), store.requests(), store.inventories())
