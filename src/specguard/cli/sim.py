"""``specguard sim``: the what-if simulator's commands. They parse, validate at the edge and delegate to ``sim.run``.

Every option is checked here, through ``SimRequest`` and ``AcceptanceRates`` (the models the simulator
uses) and the catalogs, before the first simulated step: a bad value is one line naming its option, exit 2.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specguard.cli.exit import EXIT_CODES_EPILOG
from specguard.cli.output import err
from specguard.errors import OptionError

if TYPE_CHECKING:
    from specguard.sim.inputs import Taken

sim_app = typer.Typer(
    help="What-if simulator: predicted latency and throughput of a speculative setting versus the baseline, per rate.",
    epilog=EXIT_CODES_EPILOG,
    no_args_is_help=True,
)

# SimRequest field -> the option that sets it, so that a pydantic error names the option
SIM_OPTIONS = {
    "target": "--target",
    "gpu": "--gpu",
    "tensor_parallel_size": "--tp",
    "rates": "--rate",
    "prompt_len": "--prompt-len",
    "output_len": "--output-len",
    "lengths": "--lengths-from",
    "method": "--method",
    "draft": "--draft",
    "num_speculative_tokens": "--num-speculative-tokens",
    "acceptance": "--acceptance",
    "arrivals.burstiness": "--burstiness",
    "arrivals.kind": "--arrival",
    "duration_s": "--duration",
    "warmup_s": "--warmup",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "block_size": "--block-size",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_model_len": "--max-model-len",
    "crossover_metric": "--crossover-metric",
    "vllm_version": "--vllm-version",
    "seed": "--seed",
    "engine": "--engine",
}


class SimMethodOption(StrEnum):
    """sim.run.SimMethod's names, for typer to list in --help (a unit test holds the two the same)."""

    ngram = "ngram"
    suffix = "suffix"
    draft_model = "draft_model"
    eagle = "eagle"
    eagle3 = "eagle3"
    mtp = "mtp"


class SimEngineOption(StrEnum):
    v1 = "v1"
    v0 = "v0"


class SimArrival(StrEnum):
    poisson = "poisson"
    gamma = "gamma"
    constant = "constant"
    trace = "trace"


def _catalog(option: str, value: str | None, *, gpu: bool = False) -> None:
    """An unknown model or GPU is refused here, naming the option, with the catalog's list of names."""
    from specguard.sizing.catalog import CatalogError, resolve_gpu, resolve_model

    if value is None:
        return
    try:
        resolve_gpu(value, None) if gpu else resolve_model(value)
    except CatalogError as exc:
        raise OptionError(f"{option} {value}: {exc.message}") from exc


def _from_files(
    target: str,
    lengths_from: Path | None,
    tokenizer: Path | None,
    prompt_len: int | None,
    output_len: int | None,
    acceptance_from: Path | None,
    acceptance: str | None,
    method: SimMethodOption | None,
) -> Taken:
    """--lengths-from and --acceptance-from read, after the options they exclude are refused."""
    from specguard.sim.inputs import Taken
    from specguard.sim.inputs import acceptance_from as read_acceptance
    from specguard.sim.inputs import lengths_from as read_lengths
    from specguard.validation import tokenizer_option

    if lengths_from is not None and prompt_len is not None:
        raise OptionError("--lengths-from and --prompt-len: the prompt lengths come from one of them; give one")
    if acceptance_from is not None and acceptance is not None:
        raise OptionError("--acceptance-from and --acceptance: the acceptance comes from one of them; give one")
    if lengths_from is None and tokenizer is not None:
        raise OptionError("--tokenizer: only with --lengths-from a prompt file or request log")
    for path, option in ((lengths_from, "--lengths-from"), (acceptance_from, "--acceptance-from")):
        if path is not None and not path.exists():
            raise OptionError(f"{option} {path}: not found")
    taken = Taken()
    if lengths_from is not None:
        local_target = Path(target) if Path(target).is_dir() and (Path(target) / "tokenizer.json").is_file() else None
        taken = read_lengths(lengths_from, tokenizer=tokenizer_option(tokenizer) or local_target, output_len=output_len)
    if acceptance_from is not None:
        got = read_acceptance(acceptance_from, method.value if method else None)
        taken = Taken(lengths=taken.lengths, acceptance=got.acceptance, notes=[*taken.notes, *got.notes])
    return taken


@sim_app.command("run", epilog=EXIT_CODES_EPILOG)
def run(
    target: Annotated[str, typer.Option(help="Target model: a catalog name (llama-3.1-8b, qwen3-8b, ...) or a local HF dir.")],
    gpu: Annotated[str, typer.Option(help="h100-80gb, h200-141gb, a100-40gb, a100-80gb, l40s, b200.")],
    rate: Annotated[list[float], typer.Option("--rate", help="Request rate in req/s (repeatable: one point per rate).")],
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor-parallel size of the target (default 1).")] = None,
    prompt_len: Annotated[int | None, typer.Option(help="Prompt tokens of every request (default 512).")] = None,
    output_len: Annotated[
        int | None, typer.Option(help="Output tokens of every request (default 256); with a prompt file, its outputs.")
    ] = None,
    lengths_from: Annotated[
        Path | None,
        typer.Option(
            help="Prompt and output lengths drawn from: a 'bench' run directory, an 'assess --json' report (its "
            "Gate 1 profile), an 'assess --requests-out' file, or a request log or prompt file (with --tokenizer)."
        ),
    ] = None,
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            help="With --lengths-from a prompt file or log: the tokenizer counting its prompts (default: --target's dir)."
        ),
    ] = None,
    method: Annotated[
        SimMethodOption | None, typer.Option(help="The speculative arm's method; without it only the baseline runs.")
    ] = None,
    draft: Annotated[str | None, typer.Option(help="--method draft_model: the draft (catalog name or local HF dir).")] = None,
    num_speculative_tokens: Annotated[int | None, typer.Option(help="k (default: the length of --acceptance, else 4).")] = None,
    acceptance: Annotated[
        str | None,
        typer.Option(
            help="Per-position acceptance a_1,a_2,... in [0, 1], non-increasing (a bench run's acceptance.per_position); "
            "default: assumed 0.7^i, with a warning."
        ),
    ] = None,
    acceptance_from: Annotated[
        Path | None,
        typer.Option(
            help="Per-position acceptance from a 'bench' run directory (the server's spec-decode counters) or an "
            "'assess --json' report (its replay of --method ngram or suffix)."
        ),
    ] = None,
    duration: Annotated[float | None, typer.Option(help="Simulated seconds of arrivals per rate (default 300).")] = None,
    warmup: Annotated[float | None, typer.Option(help="Simulated seconds excluded at the start (default: a tenth).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seeds arrivals, lengths and acceptance draws (default 0).")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM's max_num_seqs (default: vLLM's for the --gpu).")] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="vLLM's max_num_batched_tokens (default: vLLM's for the --gpu).")
    ] = None,
    block_size: Annotated[int | None, typer.Option(help="KV block size in tokens (default 16).")] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(help="vLLM's gpu_memory_utilization (default 0.9).")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Default: the target's max_position_embeddings.")] = None,
    arrival: Annotated[
        SimArrival | None, typer.Option(help="Arrival process (default poisson; trace: with --arrivals-from).")
    ] = None,
    arrivals_from: Annotated[
        Path | None,
        typer.Option(
            help="--arrival trace: arrival times from an open-loop 'bench' run (its send times) or a request log (its "
            "timestamps), replayed in shape at each --rate."
        ),
    ] = None,
    burstiness: Annotated[float | None, typer.Option(help="With --arrival gamma: the shape; 1 is Poisson, <1 burstier.")] = None,
    crossover_metric: Annotated[
        str | None,
        typer.Option(
            help="The metric whose p50 speed-up decides the crossover: e2e_ms (default), tpot_ms, itl_ms, ttft_ms, "
            "throughput_tokens_per_s."
        ),
    ] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option(help="The release whose preflight rules check the k-per-band config (default: latest known)."),
    ] = None,
    profile: Annotated[
        Path | None, typer.Option(help="A calibrated step-time profile ('specguard sim calibrate') instead of the roofline.")
    ] = None,
    engine: Annotated[
        SimEngineOption | None,
        typer.Option(
            help="v1 (default): today's vLLM engine. v0: vLLM before 0.8 (no chunked prefill, batch-expansion scoring, "
            "V0's published CPU costs), to compare with V0-era measurements; not with --profile."
        ),
    ] = None,
    html: Annotated[Path | None, typer.Option(help="Also write the HTML report to this file.")] = None,
    force: Annotated[bool, typer.Option("--force", metavar="", help="With --html: replace a file that exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the report as JSON instead of the table.")] = False,
) -> None:
    """Simulate the baseline and one speculative setting at each --rate: latencies, throughput, the crossover rate,
    the best k per batch-size band. Every figure is a prediction of specguard's engine model, not a measurement."""
    from specguard.sim.acceptance import parse_acceptance
    from specguard.sim.render import render_table
    from specguard.sim.run import SimRequest, run_sim
    from specguard.sim.workload import Arrivals
    from specguard.validation import finite, given, input_path, options, output_file, refuse_existing, version_option

    for r in rate:
        finite(r, "--rate")
    finite(duration, "--duration")
    finite(warmup, "--warmup")
    finite(burstiness, "--burstiness")
    finite(gpu_memory_utilization, "--gpu-memory-utilization")
    if burstiness is not None and arrival != SimArrival.gamma:
        raise OptionError("--burstiness: only with --arrival gamma")
    if (arrival == SimArrival.trace) != (arrivals_from is not None):
        raise OptionError("--arrival trace and --arrivals-from PATH go together: the trace's times come from PATH")
    trace_s, trace_note = None, None
    if arrivals_from is not None:
        from specguard.sim.inputs import arrivals_from as read_arrivals

        if not arrivals_from.exists():
            raise OptionError(f"--arrivals-from {arrivals_from}: not found")
        trace_s, trace_note = read_arrivals(arrivals_from)
    version_option(vllm_version)
    input_path(profile, "--profile")
    if html is not None:
        output_file(html, "--html")
        if not force:
            refuse_existing([html], "--html")
    fitted = None
    if profile is not None:
        from specguard.sim.calibrate import load_profile

        fitted = load_profile(profile)
    rates_given = parse_acceptance(acceptance)
    taken = _from_files(target, lengths_from, tokenizer, prompt_len, output_len, acceptance_from, acceptance, method)
    rates_taken = taken.acceptance
    if rates_taken is not None and num_speculative_tokens is not None and num_speculative_tokens < rates_taken.k:
        taken.notes.append(
            f"--num-speculative-tokens {num_speculative_tokens}: the first {num_speculative_tokens} of the "
            f"{rates_taken.k} positions measured in {acceptance_from} are simulated"
        )
    arrivals = options(
        Arrivals,
        given(kind=arrival.value if arrival else None, burstiness=burstiness, trace_s=trace_s),
        {"kind": "--arrival", "burstiness": "--burstiness"},
    )
    request = options(
        SimRequest,
        given(
            target=target,
            gpu=gpu,
            tensor_parallel_size=tp,
            rates=rate,
            prompt_len=prompt_len if taken.lengths is None else None,
            output_len=output_len if taken.lengths is None else None,
            lengths=taken.lengths,
            method=method.value if method else None,
            draft=draft,
            num_speculative_tokens=num_speculative_tokens,
            acceptance=rates_taken.per_position if rates_taken else rates_given,
            acceptance_source=rates_taken.source if rates_taken else "--acceptance" if rates_given else None,
            arrivals=arrivals,
            duration_s=duration,
            warmup_s=warmup,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            crossover_metric=crossover_metric,
            vllm_version=vllm_version,
            seed=seed,
            engine=engine.value if engine else None,
            profile=fitted.profile if fitted else None,
            profile_source=f"{profile}, fitted to {', '.join(fitted.source_runs)}" if fitted else None,
        ),
        SIM_OPTIONS,
    )
    _catalog("--target", request.target)
    _catalog("--gpu", request.gpu, gpu=True)
    if request.method == "draft_model":
        _catalog("--draft", request.draft)
    # run_sim checks the rest (--tp against the heads, the KV pool, --warmup against --duration) before its first step
    report = run_sim(request)
    report.warnings.extend(taken.notes)
    if trace_note is not None:
        report.warnings.append(f"arrivals: the shape of the {trace_note}, scaled to each --rate")
    if html is not None:
        from specguard.sim.html import write_sim_html

        write_sim_html(report, html, force=force)
        err.print(f"wrote {html}", highlight=False, markup=False)
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        print(render_table(report), end="")


@sim_app.command()
def calibrate(
    run_dirs: Annotated[list[Path], typer.Argument(help="'specguard bench' run directories: baseline and candidate runs.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the profile (a JSON file).")],
    force: Annotated[bool, typer.Option("--force", metavar="", help="Replace a profile file that exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the calibration report as JSON.")] = False,
) -> None:
    """Fit the step time (fixed + per KV token + per batched token) to your own runs and save it as a profile.

    Later 'specguard sim run --profile FILE' uses it instead of the roofline. The fit error printed is against the
    very gaps it was fitted to; predict runs it was not fitted to for an honest error (bench/sim_validation.py).
    """
    from specguard.sim.calibrate import calibrate as fit
    from specguard.sim.calibrate import save_profile, sim_profile
    from specguard.sim.render import render_calibration
    from specguard.validation import input_path, output_file, refuse_existing

    for d in run_dirs:
        input_path(d, "RUN_DIRS", directory=True)
    output_file(out, "--out")
    if not force:
        refuse_existing([out], "--out")
    report = fit(run_dirs)
    save_profile(out, sim_profile(report), force=force)
    err.print(f"wrote {out}", highlight=False, markup=False)
    print(report.model_dump_json(indent=2) if as_json else render_calibration(report), end="\n" if as_json else "")


def register(app: typer.Typer) -> None:
    from specguard.sim.serve_cli import register_serve

    register_serve(sim_app)
    app.add_typer(sim_app, name="sim")
