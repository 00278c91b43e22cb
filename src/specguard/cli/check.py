"""``specguard check``, ``report`` and ``demo`` (Gate 4): the A/B matrix, its report and verdict, the main job."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from specguard.cli.exit import EXIT_CODES_EPILOG
from specguard.cli.output import err
from specguard.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from specguard.loadgen.runner import MatrixProgress
    from specguard.report.model.data import VerdictFile


def _print_verdict(v: VerdictFile, out: Path, as_json: bool) -> None:
    """The verdict for a reader (the terminal summary) or for a script (verdict.json's document, on stdout alone)."""
    from specguard.report.render.verdict_terminal import render_terminal
    from specguard.results.check_dir import CheckDir

    if as_json:
        print(v.model_dump_json(indent=2))
    else:
        Console().print(render_terminal(v, str(CheckDir(out).report_html)), highlight=False)


JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", metavar="", help='Print verdict.json\'s document on stdout instead of the summary; on failure {"error": ...}.'
    ),
]


@contextlib.contextmanager
def _check_progress(quiet: bool) -> Iterator[MatrixProgress | None]:
    """Blocks, runs and requests with ETAs on stderr while a check runs; none when quiet or not a terminal."""
    from specguard.report.render.terminal import RichCheckProgress, show_progress

    if not show_progress(err, quiet):
        yield None
        return
    progress = RichCheckProgress(err)
    try:
        yield progress
    finally:
        progress.close()


def check_exit_line(v: VerdictFile) -> str:
    """What 'specguard check' on the demo's plan exits with, and what that code means for a check (not for every
    command: the shared table's line for 1 also says "rejected" and "a diff", which belong to preflight and inventory)."""
    return f"verdict exit code: {v.exit_code} ({v.verdict}): 'specguard check' on this plan exits {v.exit_code}"


def check(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="A check plan (YAML); see examples/.")],
    out: Annotated[Path, typer.Option(help="A new directory for the runs, verdict.json, report.md and report.html.")],
    resume: Annotated[
        bool, typer.Option("--resume", metavar="", help="Continue an interrupted check in --out: only the blocks not yet done.")
    ] = False,
    label: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE metadata (repeatable) over the plan labels, in every run and check.json."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            metavar="",
            help="Print the requests each cell needs and sends, the total and a time estimate; send nothing.",
        ),
    ] = False,
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            metavar="",
            help="While INCONCLUSIVE, run further repetitions of the undecided levels and decide again, within the "
            "plan's sequential: budget (alpha spent over the planned looks).",
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
        typer.Option(
            "--keep-output", metavar="", help="Keep every output's token ids (as the plan's keep_output: true); may be sensitive."
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", metavar="", help="No progress display (it is off anyway when stderr is not a terminal).")
    ] = False,
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
    as_json: JsonOpt = False,
) -> None:
    """Run a check plan's A/B matrix and decide: exit 0 GO, 1 NO-GO, 3 INCONCLUSIVE (2 bad input, 4 runtime failure).

    The check writes its state as it goes; Ctrl-C or SIGTERM stop it at once (exit 130, no verdict),
    and --resume continues it, refusing if the plan changed. With --baseline-run only the candidate is
    measured; each run is checked against its cell's workload before anything is sent.
    """
    from specguard.check.dry_run import dry_run as plan_dry_run
    from specguard.check.dry_run import render_dry_run
    from specguard.check.launchers.embedded import embedded_launcher
    from specguard.check.launchers.simulated import sim_launcher, uses_sim
    from specguard.check.plan import load_plan
    from specguard.check.report import write_outputs
    from specguard.check.requirements import plan_warnings
    from specguard.check.runner import run_check, validate_check
    from specguard.loadgen.extras import parse_labels

    plan = load_plan(plan_path)
    if keep_output:
        plan = plan.model_copy(update={"keep_output": True})
    if label:
        plan = plan.model_copy(update={"labels": {**plan.labels, **parse_labels(label)}})
    if dry_run:  # refuses what the check would refuse before sending: prompts, key variables, --baseline-run, --out
        validate_check(plan, plan_path, out, resume=resume, baseline_runs=baseline_run or ())
        from specguard.check.pilot import pilot_spreads
        from specguard.verdict.power import Effect

        spreads, spreads_from = None, "stated defaults: the embedded CPU demo's; --pilot DIR measures yours"
        if pilot is not None:
            spreads, used = pilot_spreads(pilot, plan.objective.metric)
            spreads_from = f"measured in {pilot}, {used} requests"
        gain = 2 * plan.objective.min_improvement if assume_improvement is None else assume_improvement
        effect = Effect(min(gain, 0.95), assume_guardrail_ratio, assume_guardrail_ratio)
        estimate = plan_dry_run(plan, bool(baseline_run), effect, spreads, spreads_from)
        if as_json:
            print(estimate.model_dump_json(indent=2))
            raise typer.Exit(0)
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
    _print_verdict(v, out, as_json)
    raise typer.Exit(v.exit_code)


def report(
    out: Annotated[Path, typer.Argument(help="A directory written by 'specguard check' or 'specguard demo'.")],
    force: Annotated[
        bool, typer.Option("--force", metavar="", help="Replace the existing verdict.json, report.md and report.html.")
    ] = False,
    partial: Annotated[
        bool, typer.Option("--partial", metavar="", help="Render an interrupted check's runs so far, labelled, with no verdict.")
    ] = False,
    as_json: JsonOpt = False,
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
        if as_json:
            print(json.dumps({"partial_report": str(path), "verdict": None}))
        raise typer.Exit(ExitCode.INCONCLUSIVE)
    v = write_outputs(record, out, force=force)
    _print_verdict(v, out, as_json)
    raise typer.Exit(v.exit_code)


def demo(
    out: Annotated[Path | None, typer.Option(help="A new directory for the demo (default: runs/demo-TIME).")] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", metavar="", help="No progress display (it is off anyway when stderr is not a terminal).")
    ] = False,
    simulated: Annotated[
        bool,
        typer.Option(
            "--simulated",
            metavar="",
            help="Run against specguard's simulated servers (Llama-3-70B on 4 x H100, baseline vs draft model, QPS 1 "
            "to past the crossover), not the embedded vLLM; every page is labelled simulated.",
        ),
    ] = False,
    as_json: JsonOpt = False,
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
    _print_verdict(v, out, as_json)
    (err if as_json else Console()).print(check_exit_line(v), highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.command(epilog=EXIT_CODES_EPILOG)(check)
    app.command(epilog=EXIT_CODES_EPILOG)(report)
    app.command(epilog=EXIT_CODES_EPILOG)(demo)
