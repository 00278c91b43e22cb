"""``specguard preflight``, ``plan``, ``inventory`` and ``assess`` (Gates 0-3). They parse and delegate."""

from __future__ import annotations

import json
import os
import shutil
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from specguard.cli.exit import EXIT_CODES_EPILOG
from specguard.cli.output import err, out
from specguard.cli.renamed import renamed
from specguard.errors import ExitCode
from specguard.validation import env_base_url, input_path, server_api_key, server_url, text_option, version_option


class Arm(StrEnum):
    baseline = "baseline"
    candidate = "candidate"


class LogFormat(StrEnum):
    auto = "auto"
    specguard = "specguard"
    openai = "openai"
    sharegpt = "sharegpt"
    bench = "bench"


def preflight(
    python: Annotated[Path | None, typer.Option(help="Interpreter of the vLLM to inspect.")] = None,
    vllm_bin: Annotated[
        Path | None, typer.Option("--vllm-bin", help="A 'vllm' executable (or an interpreter) to inspect.")
    ] = None,
    vllm: Annotated[Path | None, typer.Option("--vllm", hidden=True, help="The old name of --vllm-bin.")] = None,
    vllm_version: Annotated[str | None, typer.Option(help="No vLLM here: apply specguard's rules for this version.")] = None,
    config: Annotated[str | None, typer.Option(help="Speculative config: JSON text or a file holding it.")] = None,
    command: Annotated[str | None, typer.Option(help="Lint a vllm serve line or systemd ExecStart= (text or file).")] = None,
    target: Annotated[Path | None, typer.Option(help="Local target model directory (config.json) for the checks.")] = None,
    tp: Annotated[int, typer.Option("--tp", min=1, help="Target tensor-parallel size.")] = 1,
    max_model_len: Annotated[int | None, typer.Option(min=1, help="Target max model len.")] = None,
    url: Annotated[
        str | None, typer.Option(help="A running server: /version, /v1/models, /metrics (default: $OPENAI_BASE_URL).")
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Environment variable holding the server's API key (default: OPENAI_API_KEY).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the report as JSON.")] = False,
) -> None:
    """Gate 0: which vLLM is installed, which speculation flags it accepts, and whether a config is valid for it.

    Exit 0 when the config (or command) is accepted or none was given, 1 when it would be rejected,
    2 on bad input, 4 when no vLLM (or the --url server) could be reached.
    """
    from specguard.preflight.render import print_preflight
    from specguard.preflight.run import run_preflight
    from specguard.vllm.serve_inputs import load_command, load_config

    version_option(vllm_version)
    if python is None or os.sep in str(python) or not shutil.which(str(python)):  # a bare name runs from PATH
        input_path(python, "--python")
    vllm = renamed(vllm_bin, vllm, "--vllm-bin", "--vllm")
    input_path(vllm, "--vllm-bin")
    input_path(target, "--target", directory=True)
    text_option(config, "--config")
    text_option(command, "--command")
    url = server_url(url)
    cfg = load_config(config) if config is not None else None
    argv = load_command(command) if command is not None else None
    report = run_preflight(
        python=python,
        vllm=vllm,
        vllm_version=vllm_version,
        config=cfg,
        command=argv,
        target=target,
        tensor_parallel_size=tp,
        max_model_len=max_model_len,
        url=url,
        api_key=server_api_key(api_key_env),
    )
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        print_preflight(report, out)
    if report.server is not None and not report.server.reachable:
        raise typer.Exit(ExitCode.RUNTIME_FAILURE)
    raise typer.Exit(ExitCode.NO_GO if report.valid is False else ExitCode.OK)


def plan(
    target: Annotated[str, typer.Option(help="Catalog name (llama-3.1-70b, qwen3-8b, ...) or a local HF directory.")],
    gpu: Annotated[str | None, typer.Option(help="h100-80gb, h200-141gb, a100-40gb, a100-80gb, l40s, b200.")] = None,
    gpu_memory_gib: Annotated[float | None, typer.Option(help="A custom GPU memory size.")] = None,
    kv_cache_memory_gib: Annotated[float | None, typer.Option(help="Fixed KV budget per GPU (kv_cache_memory_bytes).")] = None,
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor parallelism of the target.")] = None,
    draft: Annotated[str | None, typer.Option(help="Draft model or EAGLE head: catalog name or local directory.")] = None,
    method: Annotated[str | None, typer.Option(help="ngram, suffix, draft_model, eagle, eagle3, mtp, ...")] = None,
    draft_layers: Annotated[int | None, typer.Option(help="EAGLE head layers when no head directory is given.")] = None,
    draft_tp: Annotated[int | None, typer.Option(help="draft_tensor_parallel_size (1 or the target's TP).")] = None,
    num_speculative_tokens: Annotated[int | None, typer.Option(help="k; default by method.")] = None,
    dtype: Annotated[str | None, typer.Option(help="Weight dtype or quantization: bfloat16, fp8, awq, gptq, mxfp4...")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="auto (the model's dtype), fp8, ...")] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(help="Default: the version's (0.9, 0.92 from 0.20).")] = None,
    non_kv_reserve_gib: Annotated[float | None, typer.Option(help="Activations, CUDA graphs, context per GPU.")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Default: the model's max_position_embeddings.")] = None,
    block_size: Annotated[int | None, typer.Option(help="KV block size in tokens.")] = None,
    prompt_len: Annotated[int | None, typer.Option(help="Mean prompt tokens of the workload.")] = None,
    output_len: Annotated[int | None, typer.Option(help="Mean output tokens of the workload.")] = None,
    expected_concurrency: Annotated[int | None, typer.Option(help="Warn when speculation pushes it past KV capacity.")] = None,
    gate1: Annotated[Path | None, typer.Option(help="A 'specguard assess --json' report.")] = None,
    vllm_version: Annotated[str | None, typer.Option(help="Version to emit the config for (default: embedded).")] = None,
    url: Annotated[
        str | None,
        typer.Option(help="A running server: set the prediction beside its num_gpu_blocks (default: $OPENAI_BASE_URL)."),
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Environment variable holding the server's API key (default: OPENAI_API_KEY).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the plan as JSON.")] = False,
) -> None:
    """Gates 2 and 3: memory with and without speculation, a method recommendation and the config to use."""
    from specguard.sizing.render import print_plan
    from specguard.sizing.run import PLAN_OPTIONS, PlanRequest, build_plan
    from specguard.validation import given, options

    request = options(
        PlanRequest,
        given(
            target=target,
            gpu=gpu,
            gpu_memory_gib=gpu_memory_gib,
            kv_cache_memory_gib=kv_cache_memory_gib,
            tensor_parallel_size=tp,
            draft=draft,
            method=method,
            draft_layers=draft_layers,
            draft_tensor_parallel_size=draft_tp,
            num_speculative_tokens=num_speculative_tokens,
            dtype=dtype,
            kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            non_kv_reserve_gib=non_kv_reserve_gib,
            max_model_len=max_model_len,
            block_size=block_size,
            prompt_len=prompt_len,
            output_len=output_len,
            expected_concurrency=expected_concurrency,
            gate1=gate1,
            vllm_version=vllm_version,
            url=url if url is not None else env_base_url(),  # a given --url is checked by PlanRequest
        ),
        PLAN_OPTIONS,
    )
    report = build_plan(request, server_api_key(api_key_env))
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        print_plan(report, out)


inventory_app = typer.Typer(
    help="Gate 3's pinned inventory: write one, or diff two.", no_args_is_help=False, epilog=EXIT_CODES_EPILOG
)


@inventory_app.callback(invoke_without_command=True)
def inventory(
    ctx: typer.Context,
    url: Annotated[
        str | None, typer.Option(help="A running server to record (default, without --command or --plan: $OPENAI_BASE_URL).")
    ] = None,
    command: Annotated[str | None, typer.Option(help="A vllm serve line or systemd unit (text or file) to record.")] = None,
    config: Annotated[str | None, typer.Option(help="With --url: the server's speculative config (JSON or file).")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU type, for a server that is not on this machine.")] = None,
    plan_path: Annotated[Path | None, typer.Option("--plan", help="A check plan: record one of its arms.")] = None,
    arm: Annotated[Arm | None, typer.Option(help="With --plan: which arm.")] = None,
    runs: Annotated[list[Path] | None, typer.Option("--run", help="Benchmark run dirs for mean prompt/output tokens.")] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Environment variable holding the server's API key (default: OPENAI_API_KEY).")
    ] = None,
    out_path: Annotated[Path, typer.Option("--out", help="Where to write it (new, unless --force).")] = Path("inventory.json"),
    force: Annotated[bool, typer.Option("--force", metavar="", help="Replace an existing --out file.")] = False,
) -> None:
    """Write inventory.json for a running server (--url), a launch command (--command) or a check plan's arm."""
    if ctx.invoked_subcommand is not None:
        return
    from specguard.inventory.request import InventoryRequest, PlanArm, build_inventory

    if command is None and plan_path is None:  # the server is then the only thing to record
        url = server_url(url)
    request = InventoryRequest(
        url=url,
        command=command,
        config=config,
        gpu=gpu,
        plan_path=plan_path,
        arm=arm.value if arm else None,
        runs=runs or [],
        # only a server is sent the key: a launch line alone needs none
        api_key=server_api_key(api_key_env) if url is not None or plan_path is not None else None,
        out_path=out_path,
        force=force,
    )
    resolve: PlanArm | None = None
    if plan_path is not None:  # the check side and the embedded runtime are heavy: imported only with --plan
        from specguard.check.launchers.embedded import plan_arm

        resolve = plan_arm
    inv = build_inventory(request, resolve)
    out_path.write_text(inv.model_dump_json(indent=2))
    err.print(f"wrote {out_path}", highlight=False)


@inventory_app.command("diff", epilog=EXIT_CODES_EPILOG)
def inventory_diff(
    a: Annotated[Path, typer.Argument(help="Baseline inventory.json")],
    b: Annotated[Path, typer.Argument(help="Candidate inventory.json")],
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the diff as JSON.")] = False,
) -> None:
    """List what differs; warn when more than one deployment variable changed. Exit 1 when it did."""
    from specguard.inventory.diff import diff_inventories
    from specguard.inventory.model import load_inventory

    d = diff_inventories(load_inventory(a), load_inventory(b))
    if as_json:
        print(d.model_dump_json(indent=2))
    else:
        for diff in d.differences:
            kind = "variable" if diff.variable else "measured"
            out.print(f"{kind:<9} {diff.field}: {json.dumps(diff.a)} -> {json.dumps(diff.b)}", highlight=False, markup=False)
        if not d.differences:
            out.print("identical")
        for w in d.warnings:
            err.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    raise typer.Exit(ExitCode.NO_GO if len(d.changed_variables) > 1 else ExitCode.OK)


def assess(
    log: Annotated[Path, typer.Argument(help="Request log (JSONL): specguard, OpenAI pairs, ShareGPT or bench prompts.")],
    tokenizer: Annotated[Path | None, typer.Option(help="Local Hugging Face tokenizer directory.")] = None,
    url: Annotated[
        str | None,
        typer.Option(help="Tokenize with a running server's /tokenize instead (default, without --tokenizer: $OPENAI_BASE_URL)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="With --url: the served model name.")] = None,
    log_format: Annotated[LogFormat, typer.Option("--format", help="The log's format.")] = LogFormat.auto,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", metavar="", help="Skip malformed lines, count them and report them.")
    ] = False,
    segment_rule: Annotated[list[str] | None, typer.Option(help="NAME=REGEX on the prompt, first match wins.")] = None,
    sweep: Annotated[bool, typer.Option(help="Sweep n-gram and suffix settings per segment.")] = True,
    suffix: Annotated[bool, typer.Option(help="Replay suffix decoding too.")] = True,
    python: Annotated[
        Path | None,
        typer.Option(help="A vLLM environment's python: replay suffix decoding on its Arctic Inference (a subprocess)."),
    ] = None,
    max_model_len: Annotated[int | None, typer.Option(min=1, help="The server's max model len (caps drafts).")] = None,
    capacity_rps: Annotated[float | None, typer.Option(help="Requests/s the deployment sustains (> 0).")] = None,
    bench_run: Annotated[Path | None, typer.Option(help="A saturating 'specguard bench' run: its rate is the capacity.")] = None,
    plan_json: Annotated[Path | None, typer.Option(help="A 'specguard plan --json' result: KV capacity and warnings.")] = None,
    write_plan: Annotated[Path | None, typer.Option(help="Write plan.yaml + prompts.jsonl for 'specguard check' here.")] = None,
    requests_out: Annotated[Path | None, typer.Option(help="Write each request's own replay here (JSONL).")] = None,
    target: Annotated[str | None, typer.Option("--target", help="With --write-plan: the target model the plan launches.")] = None,
    target_model: Annotated[str | None, typer.Option("--target-model", hidden=True, help="The old name of --target.")] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Environment variable holding the server's API key (default: OPENAI_API_KEY).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", metavar="", help="Replace existing --write-plan and --requests-out files.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the assessment as JSON.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", metavar="", help="No progress display (it is off anyway when stderr is not a terminal).")
    ] = False,
) -> None:
    """Gate 1: profile the traffic, replay n-gram and suffix proposers on it, and judge each segment."""
    from specguard.report.render.terminal import CountProgress, show_progress
    from specguard.workload.assess_request import AssessRequest, run_assessment
    from specguard.workload.render import print_assessment

    if tokenizer is None:  # a server tokenizes only when no tokenizer is given
        url = server_url(url)
    request = AssessRequest(
        log=log,
        tokenizer=tokenizer,
        url=url,
        model=model,
        log_format=log_format.value,
        skip_bad=skip_bad,
        segment_rules=segment_rule or [],
        sweep=sweep,
        suffix=suffix,
        python=python,
        max_model_len=max_model_len,
        capacity_rps=capacity_rps,
        bench_run=bench_run,
        plan_json=plan_json,
        write_plan=write_plan,
        requests_out=requests_out,
        target_model=renamed(target, target_model, "--target", "--target-model"),
        api_key=server_api_key(api_key_env) if url is not None else None,  # only a server is sent the key
        force=force,
    )
    with CountProgress(err, show_progress(err, quiet), f"assessing {log.name}") as progress:
        report = run_assessment(request, progress.requests)
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        print_assessment(report, out)


def register(app: typer.Typer) -> None:
    app.command(epilog=EXIT_CODES_EPILOG)(preflight)
    app.command(epilog=EXIT_CODES_EPILOG)(plan)
    app.command(epilog=EXIT_CODES_EPILOG)(assess)
    app.add_typer(inventory_app, name="inventory")
