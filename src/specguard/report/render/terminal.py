"""Rich tables of run summaries, alone or side by side, and the live progress displays (bench, check, steps).

Progress goes to the console it is given (stderr in the CLI) and only when ``show_progress`` says so: not
with ``--quiet``, and not when that console is not a terminal (a log file or CI gets the log lines only).
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from specguard.analysis.compare import Comparison
from specguard.analysis.definitions import RATIO_FOOTNOTE, SUMMARY_FOOTNOTE
from specguard.loadgen.recorder import RecordWritten
from specguard.loadgen.runner import MatrixProgress, ProgressSink
from specguard.number_format import fmt, fmt_samples
from specguard.results.models import GaugeSeries, GpuUsage, Percentiles, Summary

_LATENCY_ROWS = [
    ("TTFT (ms)", "ttft_ms"),
    ("ITL per token (ms)", "itl_ms"),
    ("TPOT (ms)", "tpot_ms"),
    ("E2E (ms)", "e2e_ms"),
    ("inter-chunk (ms)", "inter_chunk_ms"),
    ("tokens per chunk", "tokens_per_chunk"),
]


def _pct(p: Percentiles) -> str:
    return f"{fmt(p.p50)} / {fmt(p.p95)} / {fmt(p.p99)}"


def summary_table(columns: dict[str, Summary], title: str = "specguard summary") -> Table:
    """One column per run; latency rows show p50 / p95 / p99."""
    table = Table(title=title, show_lines=False)
    table.add_column("metric")
    for name in columns:
        table.add_column(name, justify="right")
    s = list(columns.values())
    table.add_row("requests (errors)", *[f"{x.requests} ({x.errors})" for x in s])
    table.add_row("request rate (req/s)", *[fmt(x.request_rate) for x in s])
    table.add_row("output tok/s", *[fmt(x.output_tokens_per_s, 1) for x in s])
    if any(x.slo is not None for x in s):
        table.add_row("goodput (req/s)", *[fmt(x.slo.goodput) if x.slo else "-" for x in s])
        table.add_row("SLO attainment", *[_attainment(x) for x in s])
    for label, key in _LATENCY_ROWS:
        table.add_row(f"{label} p50/p95/p99", *[_pct(getattr(x, key)) for x in s])
    table.add_row(
        "acceptance rate",
        *[fmt(x.acceptance.rate, 3) if x.acceptance else "off (no counters)" for x in s],
    )
    table.add_row(
        "mean acceptance length",
        *[fmt(x.acceptance.mean_length) if x.acceptance else "-" for x in s],
    )
    table.add_row(
        "per-position acceptance",
        *[" ".join(fmt(v) for v in x.acceptance.per_position) if x.acceptance else "-" for x in s],
    )
    table.add_row("KV usage mean/max", *[_gauge(x.kv_cache_usage) for x in s])
    table.add_row("waiting mean/max", *[_gauge(x.requests_waiting) for x in s])
    table.add_row("preemptions", *[fmt(x.preemptions, 0) for x in s])
    table.add_row("GPU util mean/max %", *[_gpu(x.gpu) for x in s])
    if any(x.gpu is not None and x.gpu.available for x in s):
        table.add_row("GPU power mean/max W", *[_gpu_figure(x.gpu, "power_mean_w", "power_max_w") for x in s])
        table.add_row("GPU SM clock mean/max MHz", *[_gpu_figure(x.gpu, "sm_clock_mean_mhz", "sm_clock_max_mhz") for x in s])
    return table


def _attainment(s: Summary) -> str:
    if s.slo is None:
        return "-"
    bounds = ", ".join(f"{k}<={v:g}" for k, v in s.slo.slo.given().items())
    return f"{s.slo.attainment:.1%} of {s.requests} ({bounds})"


def _gpu(usage: GpuUsage | None) -> str:
    """Per GPU 'mean/max' utilisation (and max memory used); why not, when the GPUs could not be read."""
    if usage is None:
        return "-"
    if not usage.available:
        return "not available"
    return "; ".join(
        f"{g.gpu}: {fmt(g.utilization_mean_pct, 0)}/{fmt(g.utilization_max_pct, 0)}, {fmt(g.memory_used_max_mib, 0)} MiB"
        for g in usage.gpus
    )


def _gpu_figure(usage: GpuUsage | None, mean: str, top: str) -> str:
    """Per GPU 'mean/max' of one figure (power, SM clock): '0: 612/700; 1: 95/110'; '-' without figures."""
    if usage is None or not usage.available:
        return "-"
    return "; ".join(f"{g.gpu}: {fmt(getattr(g, mean), 0)}/{fmt(getattr(g, top), 0)}" for g in usage.gpus)


def _gauge(g: GaugeSeries | None) -> str:
    if g is None:
        return "-"
    return f"{fmt(g.mean, 3)} / {fmt(g.max, 3)}"


def print_summaries(console: Console, columns: dict[str, Summary], title: str = "specguard summary") -> None:
    console.print(summary_table(columns, title))
    for name, summ in columns.items():
        for note in summ.notes:
            console.print(f"[cyan]note[/cyan] {name}: {note}")
        for warning in summ.warnings:
            console.print(f"[yellow]warning[/yellow] {name}: {warning}")
    console.print(SUMMARY_FOOTNOTE)


def print_comparison(console: Console, result: Comparison) -> None:
    if not result.comparable:
        console.print(f"[red]not comparable[/red]: {result.baseline} vs {result.candidate}")
        for d in result.differences:
            console.print(f"  differs: {d}")
        return
    table = Table(title=f"candidate / baseline: {result.candidate} vs {result.baseline}")
    for col in ("metric", "pct", "baseline", "candidate", "ratio", "95% CI", "Mann-Whitney p", "samples"):
        table.add_column(col, justify="left" if col in ("metric", "pct") else "right")
    for metric, by_q in result.metrics.items():
        for name, r in by_q.items():
            samples = fmt_samples(r.enough_samples, r.more_requests_needed)
            table.add_row(
                metric,
                name,
                fmt(r.baseline),
                fmt(r.candidate),
                fmt(r.ratio, 3),
                f"{fmt(r.ci_low, 3)} - {fmt(r.ci_high, 3)}",
                fmt(r.mann_whitney_p, 4),
                samples,
            )
    if result.goodput is not None:
        r = result.goodput
        table.add_row(
            "goodput (req/s)",
            "",
            fmt(r.baseline),
            fmt(r.candidate),
            fmt(r.ratio, 3),
            f"{fmt(r.ci_low, 3)} - {fmt(r.ci_high, 3)}",
            "-",
            fmt_samples(r.enough_samples, r.more_requests_needed),
        )
    console.print(table)
    for note in result.notes:
        console.print(f"[cyan]note[/cyan] {note}")
    console.print(RATIO_FOOTNOTE + result.definitions["ci_low/ci_high"] + ".")
    for w in result.warnings:
        console.print(f"[yellow]warning[/yellow]: {w}", highlight=False)


def show_progress(console: Console, quiet: bool) -> bool:
    """Whether to draw a live progress display: not asked to be quiet, and the console is a terminal."""
    return not quiet and console.is_terminal


class CountColumn(ProgressColumn):
    """``done/total``, or ``done`` alone when the total is not known (a timed level): rich's own text column printed
    "41/None" (issue 29)."""

    def __init__(self, suffix: str = "") -> None:
        super().__init__()
        self.suffix = suffix

    def render(self, task: Task) -> Text:
        about = "~" if task.fields.get("about") else ""  # an expected total (timed levels at a rate), not a count
        done = f"{int(task.completed)}" if task.total is None else f"{int(task.completed)}/{about}{int(task.total)}"
        return Text(done + self.suffix.format(task=task))


class RichProgress(ProgressSink):
    """Requests done/failed, achieved rate, output tokens/s and ETA."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            CountColumn(" done, {task.fields[failed]} failed"),
            TextColumn("{task.fields[rate]:.2f} req/s, {task.fields[tps]:.0f} tok/s{task.fields[left]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self.task = self.progress.add_task("bench", total=None, failed=0, rate=0.0, tps=0.0, left="")
        self.t0 = time.monotonic()
        self.done = 0
        self.failed = 0
        self.tokens = 0
        self.duration_s: float | None = None

    def started(self, total: int | None, duration_s: float | None) -> None:
        self.t0 = time.monotonic()
        # A timed run has no count to divide by: its ETA is the time left of its --duration (rich's column needs a total)
        self.duration_s = duration_s if total is None else None
        self.progress.update(self.task, total=total)
        self.progress.start()

    def finished(self, progress: RecordWritten) -> None:
        self.done += 1
        self.failed += 0 if progress.ok else 1
        self.tokens += progress.output_tokens
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        left = "" if self.duration_s is None else f", {max(self.duration_s - elapsed, 0):.0f} s of --duration left"
        self.progress.update(
            self.task, completed=self.done, failed=self.failed, rate=self.done / elapsed, tps=self.tokens / elapsed, left=left
        )

    def close(self) -> None:
        self.progress.stop()


class RichCheckProgress(MatrixProgress):
    """A check's (or the demo's) blocks, runs and requests done, each with its ETA, and the current block and run."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description:<9}"),
            BarColumn(),
            CountColumn(),
            TextColumn("{task.fields[now]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self.blocks = self.progress.add_task("blocks", total=None, now="")
        self.runs = self.progress.add_task("runs", total=None, now="")
        self.requests = self.progress.add_task("requests", total=None, now="")
        self.failed = 0

    def matrix_started(self, blocks: int, runs: int, requests: int | None) -> None:
        self.progress.update(self.blocks, total=blocks)
        self.progress.update(self.runs, total=runs)
        self.progress.update(self.requests, total=requests)
        self.progress.start()

    def requests_expected(self, requests: int) -> None:
        self.progress.update(self.requests, total=requests, about=True)  # a total, so the bar and the ETA are drawn

    def block_started(self, name: str) -> None:
        self.progress.update(self.blocks, now=name)

    def run_started(self, cell: str) -> None:
        self.progress.update(self.runs, now=cell)

    def finished(self, progress: RecordWritten) -> None:
        self.failed += 0 if progress.ok else 1
        self.progress.update(self.requests, advance=1, now=f"{self.failed} failed" if self.failed else "")

    def run_finished(self) -> None:
        self.progress.advance(self.runs)

    def block_finished(self) -> None:
        self.progress.advance(self.blocks)

    def close(self) -> None:
        self.progress.stop()


class StepProgress:
    """A long operation of named steps (an install): each step logged as a line, the current one shown with a
    spinner and its elapsed time while it lasts; ``live=False`` (quiet, not a terminal) logs the lines only."""

    def __init__(self, console: Console, live: bool, first: str) -> None:
        self.console = console
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console)
        self.task = self.progress.add_task(first, total=None)
        self.live = live

    def __enter__(self) -> StepProgress:
        if self.live:
            self.progress.start()
        return self

    def step(self, text: str) -> None:
        self.console.print(text, highlight=False)
        self.progress.reset(self.task, description=text)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.live:
            self.progress.stop()


class CountProgress:
    """Counts that grow with no known total (an assessment's requests read and replayed), with elapsed time.

    Redrawn at most every 0.1 s: the log streams at many thousand requests a second, the display need not.
    """

    def __init__(self, console: Console, live: bool, what: str) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console)
        self.task = self.progress.add_task(what, total=None)
        self.what = what
        self.live = live
        self.shown = 0.0

    def __enter__(self) -> CountProgress:
        if self.live:
            self.progress.start()
        return self

    def requests(self, read: int, replayed: int) -> None:
        now = time.monotonic()
        if self.live and now - self.shown >= 0.1:
            self.shown = now
            self.progress.update(self.task, description=f"{self.what}: {read} requests read, {replayed} replayed")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.live:
            self.progress.stop()
