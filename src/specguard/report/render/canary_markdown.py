"""The canary's report.md: the rollout's outcome and its evidence, for a ticket or a post-mortem.

A pure function of ``CanaryReportData``, in the same shapes as check's report.md (``md_table``,
``definition_lines``, one number formatter). The weight over time is a table of its changes here; the HTML
page draws it.
"""

from __future__ import annotations

from specguard.number_format import MISSING, fmt, fmt_percent
from specguard.report.model.canary_data import CanaryReportData, HookRow, PoolStats, WindowRow
from specguard.report.render.markdown import definition_lines, md_table
from specguard.results.models import Percentiles

__all__ = ["fmt_p", "render_canary_markdown", "window_verdict_line"]

WINDOW_HEADER = [
    "segment",
    "metric",
    "comparison",
    "baseline / candidate",
    "ratio",
    "95% CI",
    "p",
    "threshold",
    "budget",
    "n base / cand",
    "verdict",
]
POOL_HEADER = ["pool", "attempts", "client requests", "errors", "error rate", "retried", "disconnected"]
PCT_HEADER = ["pool", "metric", "count", "mean", "p50", "p90", "p95", "p99", "max"]


def fmt_p(x: float | None) -> str:
    """A p-value or threshold: three significant digits (thresholds reach 1e-5 and below)."""
    return MISSING if x is None else f"{x:.3g}"


def window_verdict_line(w: WindowRow) -> str:
    counts = ", ".join(f"{pool} {n}" for pool, n in w.counts.items())
    return (
        f"window {w.look} ({w.start_utc} - {w.end_utc}) at {w.percent:g} % (step {w.step}): **{w.verdict}**, "
        f"{w.comparison} comparison, look alpha {fmt_p(w.alpha_look)}" + (f"; requests: {counts}" if counts else "")
    )


def _window(w: WindowRow) -> list[str]:
    out = [f"### {window_verdict_line(w)}", ""]
    rows = [
        [
            r.segment,
            r.metric,
            r.comparison,
            r.values_text,
            fmt(r.ratio, 3),
            f"[{fmt(r.ci_low, 3)}, {fmt(r.ci_high, 3)}]",
            fmt_p(r.p_value),
            fmt_p(r.threshold),
            r.budget_text,
            f"{r.n_baseline} / {r.n_candidate}",
            f"**{r.verdict}**" if r.verdict == "FAIL" else r.verdict,
        ]
        for r in w.results
    ]
    out += md_table(WINDOW_HEADER, rows)
    gauges = [f"{pool}: " + ", ".join(f"{k} {fmt(v)}" for k, v in g.items()) for pool, g in w.gauges.items()]
    accept = [f"{pool} {fmt(v, 3)}" for pool, v in w.acceptance.items()]
    if gauges:
        out += ["", "Gauges: " + "; ".join(gauges) + "."]
    if accept:
        out += ["", "Acceptance rate: " + ", ".join(accept) + "."]
    out += [""] + [f"- warning: {x}" for x in w.warnings] + ([""] if w.warnings else [])
    return out


def _hook(h: HookRow) -> list[str]:
    status = "timed out" if h.timed_out else f"exit {h.exit_code if h.exit_code is not None else '-'}"
    mark = "**FAILED**" if h.failed else "ok"
    out = [f"- {mark} {h.phase} hook `{' '.join(h.argv)}` (attempt {h.attempt}, {h.time_utc}): {status}, {fmt(h.duration_s)} s"]
    for name, text in (("stdout", h.stdout_tail), ("stderr", h.stderr_tail)):
        if text.strip() and h.failed:
            out += [f"  {name} (end):", "", "  ```", *[f"  {line}" for line in text.rstrip().splitlines()], "  ```"]
    return out


def _pct_rows(p: PoolStats) -> list[list[str]]:
    def row(metric: str, x: Percentiles) -> list[str]:
        return [p.pool, metric, str(x.count), fmt(x.mean), fmt(x.p50), fmt(x.p90), fmt(x.p95), fmt(x.p99), fmt(x.max)]

    return [row("ttft_ms", p.ttft_ms), row("itl_ms", p.itl_ms), row("tpot_ms", p.tpot_ms), row("e2e_ms", p.e2e_ms)]


def render_canary_markdown(data: CanaryReportData) -> str:
    d = data
    out = [f"# specguard canary `{d.rollout_name}`: **{d.status}**", "", f"**{d.summary}**", ""]
    out += [
        f"- state: {d.status}, weight {d.percent:g} % at step {d.step} of {d.steps} "
        f"({', '.join(f'{p:g} %' for p in d.step_percents)})",
        f"- created {d.created_utc}, updated {d.updated_utc}",
        "",
    ]
    if d.failed_hooks:
        out += [f"> **{d.failed_hooks} hook run(s) FAILED**: see Hooks below.", ""]
    out += ["## Weight over time", ""]
    out += md_table(
        ["time", "step", "weight", "set by"], [[p.time_utc, p.step, f"{p.percent:g} %", p.cause] for p in d.weight_changes]
    )
    out += ["", "## Windows", ""]
    if not d.windows:
        out += ["No window has been analysed yet.", ""]
    for w in d.windows:
        out += _window(w)
    out += ["## Decisions", ""]
    for x in d.decisions:
        what = x.decision or x.kind
        by = f" by {x.by}" if x.by else ""
        out.append(f"- {x.time_utc} **{what}**{by} ({x.kind}, step {x.step}, {x.percent:g} %)")
        out += [f"  - {r}" for r in x.reasons]
    out += ["", "## Hooks", ""]
    out += [line for h in d.hooks for line in _hook(h)] or ["No hook ran."]
    out += ["", "## Pools", ""]
    pool_rows = [
        [p.pool, p.attempts, p.client_requests, p.errors, fmt_percent(p.error_rate, 2), p.retried, p.disconnected]
        for p in d.pools
    ]
    out += md_table(POOL_HEADER, pool_rows)
    for p in d.pools:
        if p.errors_by_message:
            out += ["", f"{p.pool} errors: " + "; ".join(f"{m} ({n})" for m, n in p.errors_by_message.items())]
    out += ["", "### Latency over the whole rollout (ms)", ""]
    out += md_table(PCT_HEADER, [row for p in d.pools for row in _pct_rows(p)])
    out += ["", "## Inventories", ""]
    for inv in d.inventories:
        out += [f"### {inv.name}", ""] + md_table(["key", "value"], inv.rows) + [""]
    if not d.inventories:
        out += ["No inventory was recorded.", ""]
    out += ["## Error control", "", d.error_control, "", "## Definitions", ""]
    out += definition_lines(d.definitions)
    return "\n".join(out) + "\n"
