"""``specguard bench``, ``summary`` and ``compare``: one measured run, its summary, two runs side by side."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from specguard.cli.exit import EXIT_CODES_EPILOG
from specguard.cli.output import err
from specguard.cli.renamed import renamed
from specguard.errors import UsageError


class Arrival(StrEnum):
    poisson = "poisson"
    constant = "constant"
    gamma = "gamma"


class Api(StrEnum):
    completions = "completions"
    chat = "chat"


def bench(
    model: Annotated[str, typer.Option(help="Served model name sent in each request.")],
    prompts: Annotated[
        str, typer.Option(help="Prompt file (see --prompt-format), or synthetic:random|repetitive|open-ended|mixed|lengths")
    ],
    out: Annotated[Path, typer.Option(help="New run directory for run.json, requests.jsonl, summary.json.")],
    rate: Annotated[float | None, typer.Option(help="Open-loop request rate (req/s).")] = None,
    arrival: Annotated[Arrival | None, typer.Option(help="With --rate: the arrival process.")] = None,
    burstiness: Annotated[float | None, typer.Option(help="With --arrival gamma: the shape; 1 is Poisson, <1 burstier.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Closed loop: keep C requests in flight (at most 10,000).")] = None,
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
        bool,
        typer.Option(
            "--busy-poll", metavar="", help="Poll instead of sleeping between arrivals: sharper timestamps on VMs, costs a core."
        ),
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
    quiet: Annotated[bool, typer.Option("--quiet", metavar="", help="No progress display.")] = False,
    url: Annotated[
        str | None,
        typer.Option("--url", help="Server root or its /v1 URL, e.g. http://127.0.0.1:8000 (default: $OPENAI_BASE_URL)."),
    ] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", hidden=True, help="The old name of --url.")] = None,
    label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE metadata stored in run.json (repeatable).")] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="NAME:VALUE sent on every request (repeatable); credentials never stored.")
    ] = None,
    extra_body: Annotated[str | None, typer.Option(help="JSON object merged into every request body.")] = None,
    keep_output: Annotated[
        bool,
        typer.Option(
            "--keep-output",
            metavar="",
            help="Ask for token ids and keep each output's in requests.jsonl (and outputs.jsonl); may be sensitive.",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", metavar="", help='Print summary.json\'s document instead of the table; on failure {"error": ...}.'
        ),
    ] = False,
) -> None:
    """Send a workload to an OpenAI-compatible endpoint and measure it, per token.

    Exit 4 when every request failed (the distinct errors are listed with counts).
    """
    from specguard.loadgen.extras import parse_extra_body, parse_headers, parse_labels
    from specguard.loadgen.request import BenchRequest, openai_env_defaults, raise_for_outcome
    from specguard.loadgen.request import bench as run_bench_request
    from specguard.loadgen.runner import ProgressSink
    from specguard.report.render.terminal import RichProgress, print_summaries, show_progress
    from specguard.results.store import dumps
    from specguard.validation import api_key_from_env, given, options

    url = renamed(url, base_url, "--url", "--base-url")
    base_url, api_key = openai_env_defaults(url, api_key_from_env(api_key_env), api_key_env is not None)
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
    if as_json:  # one document on stdout: the summary, or the error that a failed run ends with
        raise_for_outcome(summary, out)
        print(dumps(summary))
        return
    print_summaries(Console(), {out.name or "run": summary})
    raise_for_outcome(summary, out)


def summary(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by 'specguard bench'.")],
    json_out: Annotated[bool, typer.Option("--json", metavar="", help="Print summary.json.")] = False,
    csv_out: Annotated[bool, typer.Option("--csv", metavar="", help="Print the summary as CSV (one row per metric).")] = False,
) -> None:
    """Print a run's summary table (or its JSON). A killed run without summary.json is recomputed and marked incomplete."""
    from specguard.loadgen.run_summary import load_or_recompute_summary
    from specguard.report.render.terminal import print_summaries
    from specguard.results.csv_export import summary_csv
    from specguard.results.store import dumps

    summ = load_or_recompute_summary(run_dir)
    if csv_out:
        print(summary_csv(summ), end="")
    elif json_out:
        print(dumps(summ))
    else:
        print_summaries(Console(), {run_dir.name: summ})


def compare(
    baseline: Annotated[
        str,
        typer.Argument(help="Baseline: a run directory, a vllm bench --save-detailed JSON or a GuideLLM benchmarks.json[#N]."),
    ],
    candidate: Annotated[str, typer.Argument(help="Candidate run, in any of the same formats.")],
    json_out: Annotated[bool, typer.Option("--json", metavar="", help="Print the comparison as JSON.")] = False,
    seed: Annotated[int, typer.Option(min=0, help="Seeds the bootstrap (>= 0).")] = 0,
) -> None:
    """Compare two runs: candidate/baseline percentiles with 95 % intervals. Exit 2 if not comparable.

    Either run may be another tool's: a 'vllm bench serve --save-result --save-detailed' file or a GuideLLM
    benchmarks.json (FILE#N for its N-th benchmark); what their formats cannot carry is listed as warnings.
    """
    from specguard.analysis.compare import compare_loaded
    from specguard.report.render.terminal import print_comparison
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


def register(app: typer.Typer) -> None:
    app.command(epilog=EXIT_CODES_EPILOG)(bench)
    app.command(epilog=EXIT_CODES_EPILOG)(summary)
    app.command(epilog=EXIT_CODES_EPILOG)(compare)
