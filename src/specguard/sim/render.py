"""``sim run``'s report for a terminal: a pure function of the finished ``SimReport``, returning text.

Per rate, baseline and speculative p50 and p99 of TPOT, ITL, TTFT and E2E, throughput, the speed-ups the
report holds and a mark on an arm that fell behind; then the crossover, the k per batch-size band with the
ready ``num_speculative_tokens_per_batch_size`` config and its preflight findings, and the warnings. The
sentences (crossover, bands) are shared with the HTML page (sim/html.py), so both say the same.
"""

from __future__ import annotations

import io
import json

from rich.console import Console
from rich.table import Table

from specguard.number_format import fmt, fmt_ratio
from specguard.sim.calibrate import CalibrationReport
from specguard.sim.results import ArmMetrics, KBand, RatePoint, SimReport

__all__ = [
    "LATENCY_ROWS",
    "band_line",
    "crossover_line",
    "metric_rows",
    "prediction_note",
    "render_calibration",
    "render_table",
    "setup_line",
]

LATENCY_ROWS = (("TPOT (ms)", "tpot_ms"), ("ITL (ms)", "itl_ms"), ("TTFT (ms)", "ttft_ms"), ("E2E (ms)", "e2e_ms"))
SATURATED = "SATURATED"
WIDTH = 132  # fixed, so the text does not depend on the terminal it is printed to


def prediction_note() -> str:
    return (
        "Every figure here is a prediction of specguard's engine model (a simulated vLLM scheduler and a step-time "
        "model), not a measurement; confirm a decision with 'specguard check' on a real server."
    )


def setup_line(r: SimReport) -> str:
    s = r.setup
    spec = "no speculative arm"
    if s.method:
        spec = f"{s.method}" + (f" draft {s.draft}" if s.draft else "") + f", k={s.num_speculative_tokens}"
        if s.acceptance:
            spec += f", acceptance {','.join(f'{a:g}' for a in s.acceptance)} ({s.acceptance_source})"
    return (
        f"{s.target} on {s.tensor_parallel_size} x {s.gpu}; {spec}; {s.workload}, {s.arrivals} arrivals, "
        f"{s.duration_s:g} s per rate ({s.warmup_s:g} s warm-up), seed {s.seed}; step model: {s.step_model}; "
        f"KV blocks {s.num_kv_blocks_baseline} baseline"
        + (f", {s.num_kv_blocks_speculative} speculative" if s.num_kv_blocks_speculative is not None else "")
        + f"; max_num_seqs {s.max_num_seqs}, max_num_batched_tokens {s.max_num_batched_tokens}"
        + (f" ({s.scheduler_defaults})" if s.scheduler_defaults else "")
    )


def crossover_line(r: SimReport) -> str:
    if not r.rates or r.rates[0].speculative is None:
        return "crossover: none (no speculative arm)"
    lo, hi = r.rates[0].rate, r.rates[-1].rate
    span = f"{lo:g}-{hi:g} req/s" if lo != hi else f"{lo:g} req/s"
    if r.crossover_rate is None:
        return f"crossover ({r.crossover_metric} p50): none in the simulated range ({span})"
    return f"crossover ({r.crossover_metric} p50): speculation stops paying at {r.crossover_rate:g} req/s (simulated {span})"


def band_line(b: KBand) -> str:
    batch = f"batch {b.start}" if b.start == b.end else f"batch {b.start}-{b.end}"
    what = "no speculation" if b.k == 0 else f"k={b.k}"
    return f"{batch}: {what} (decode speed {fmt_ratio(b.tokens_per_s_gain)} of none, at the least)"


def _arm(a: ArmMetrics | None, key: str, pct: str) -> str:
    if a is None:
        return "-"
    return fmt(getattr(getattr(a, key), pct))


def _state(a: ArmMetrics | None) -> str:
    if a is None:
        return "-"
    return SATURATED if a.saturated else "keeps up"


def metric_rows(p: RatePoint) -> list[list[str]]:
    """One rate's latency rows and throughput row: metric, baseline p50/p99, speculative p50/p99, speed-up.
    The terminal table and the HTML page (sim/html.py) both show these cells."""
    b, s = p.baseline, p.speculative
    rows = [
        [label, _arm(b, key, "p50"), _arm(b, key, "p99"), _arm(s, key, "p50"), _arm(s, key, "p99"), fmt_ratio(p.speedup.get(key))]
        for label, key in LATENCY_ROWS
    ]
    rows.append(
        [
            "throughput (tok/s)",
            fmt(b.throughput_tokens_per_s, 1),
            "",
            fmt(s.throughput_tokens_per_s, 1) if s else "-",
            "",
            fmt_ratio(p.speedup.get("throughput_tokens_per_s")),
        ]
    )
    return rows


def rate_table(r: SimReport) -> Table:
    t = Table(show_lines=False)
    for name, justify in (
        ("rate req/s", "right"),
        ("metric", "left"),
        ("baseline p50", "right"),
        ("baseline p99", "right"),
        ("speculative p50", "right"),
        ("speculative p99", "right"),
        ("speed-up (p50)", "right"),
    ):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for i, p in enumerate(r.rates):
        if i:
            t.add_section()
        b, s = p.baseline, p.speculative
        for j, row in enumerate(metric_rows(p)):
            t.add_row(f"{p.rate:g}" if j == 0 else "", *row)
        t.add_row("", "engine", _state(b), "", _state(s), "", "")
        t.add_row("", "mean batch (requests)", fmt(b.mean_batch, 1), "", fmt(s.mean_batch, 1) if s else "-", "", "")
        if s is not None:
            t.add_row("", "mean accepted length", "", "", fmt(s.mean_accepted_length), "", "")
    return t


def render_table(r: SimReport) -> str:
    """The report as plain text (no colour codes), ready to print."""
    buf = io.StringIO()
    console = Console(file=buf, width=WIDTH, color_system=None, force_terminal=False, highlight=False, soft_wrap=False)

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)  # a JSON line stays whole

    say(r.banner)
    say(prediction_note())
    say(setup_line(r))
    console.print(rate_table(r))
    say(crossover_line(r))
    if r.k_schedule:
        say("best k per batch-size band (predicted):")
        for b in r.k_schedule:
            say(f"  {band_line(b)}")
    if r.k_schedule_config is not None:
        version = f" for vLLM {r.k_schedule_vllm_version}" if r.k_schedule_vllm_version else ""
        say(f"speculative config with the bands{version}:")
        say(json.dumps(r.k_schedule_config))
        if r.k_schedule_findings:
            say("preflight findings on that config:")
            for f in r.k_schedule_findings:
                say(f"  {f}")
        else:
            say("preflight: no findings on that config")
    for w in r.warnings:
        say(f"warning: {w}")
    return buf.getvalue()


def render_calibration(r: CalibrationReport) -> str:
    """``sim calibrate``'s result: the coefficients, and the fit error per run and overall."""
    p = r.profile
    lines = [
        f"calibrated on {len(r.runs)} run(s) of {r.served_model}" + (f" (vLLM {r.server_version})" if r.server_version else ""),
        f"  step = {p.fixed_s * 1e3:.4g} ms + {p.per_kv_token_s * 1e9:.4g} ns x context tokens "
        f"+ {p.per_batched_token_s * 1e6:.4g} us x batched tokens",
        f"  fit error over {r.error.gaps} gaps: median {r.error.median_ape:.1%}, p90 {r.error.p90_ape:.1%}; R^2 {r.r2:.3f}",
    ]
    for run in r.runs:
        lines.append(
            f"  {run.kind:<11} {run.path}: {run.steps_used} gaps used, {run.steps_dropped} dropped, "
            f"{run.draft_tokens_per_step:.2f} draft tokens/step, median error {run.error.median_ape:.1%}"
        )
    lines.append("  (errors against the gaps it was fitted to; bench/sim_validation.py predicts runs it was not fitted to)")
    return "\n".join(lines) + "\n"
