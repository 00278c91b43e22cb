"""``specguard canary``: Gate 5, the canary with automatic analysis, promotion and rollback. It parses and delegates.

Exit codes (the shared table): ``run`` exits 0 once promoted, 1 once rolled back (with
``--exit-when-finished``; otherwise it serves until stopped), 130 when stopped by SIGTERM or SIGINT (the
state is saved and a restart resumes). ``pause|resume|promote|rollback`` exit 0 when done, 1 when refused
(the rollout is already finished, or already paused), 2 for a wrong token, 4 when the controller cannot be
reached. ``status`` and ``events`` read the state file and need no running controller.
``units``, ``observability`` and ``haproxy-config`` write files: 0 when written, 2 for bad input (nothing is written).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer

from specguard.cli.exit import EXIT_CODES_EPILOG
from specguard.cli.output import err
from specguard.errors import ExitCode, Interrupted, OptionError, RuntimeFailure, ServerError
from specguard.validation import input_path

canary_app = typer.Typer(
    help="Gate 5: ship speculation to a share of traffic, analyse it, promote or roll back by itself.",
    epilog=EXIT_CODES_EPILOG,
    no_args_is_help=True,
)

RolloutArg = Annotated[Path, typer.Argument(help="The rollout file (YAML); see examples/rollout-*.yaml.")]
StateOpt = Annotated[Path, typer.Option("--state", help="The canary's SQLite state file (the rollout's state.path).")]


def _log(message: str) -> None:
    err.print(f"{time.strftime('%H:%M:%S')} {message}", highlight=False, markup=False)


@canary_app.command("run", epilog=EXIT_CODES_EPILOG)
def run(
    rollout_file: RolloutArg,
    exit_when_finished: Annotated[
        bool,
        typer.Option("--exit-when-finished", metavar="", help="Exit once promoted (0) or rolled back (1) instead of serving on."),
    ] = False,
    drain_s: Annotated[float, typer.Option(min=0, help="On stop or rollback: seconds streams in flight get to finish.")] = 30.0,
    log_dir: Annotated[Path | None, typer.Option(help="Launched pools' server logs (default: beside the state file).")] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", metavar="", help="Print each event as it is appended, one JSON object per line (as 'canary events --json')."
        ),
    ] = False,
) -> None:
    """Serve the proxy and the admin API, and run the rollout: windows, analysis, steps, rollback, promotion."""
    from specguard.canary.control.run import run_canary
    from specguard.canary.spec.rollout import load_rollout
    from specguard.loadgen.runner import run_async

    input_path(rollout_file, "ROLLOUT")
    rollout = load_rollout(rollout_file)
    logs = log_dir or Path(rollout.state.path).resolve().parent / "logs"

    async def main() -> Any:
        return await run_canary(
            rollout,
            log=_log,
            log_dir=logs,
            exit_when_finished=exit_when_finished,
            drain_s=drain_s,
            on_event=(lambda e: print(e.model_dump_json(), flush=True)) if as_json else None,
        )

    outcome = run_async(main())
    if outcome.state_lost is not None:
        raise RuntimeFailure(f"stopped at {outcome.status}; {outcome.state_lost}: nothing was saved, and a restart starts anew")
    if outcome.interrupted:
        raise Interrupted(f"stopped at {outcome.status}; the state is saved in {rollout.state.path}: run again to resume")
    raise typer.Exit(ExitCode.OK if outcome.status == "promoted" else ExitCode.NO_GO)


@canary_app.command("status", epilog=EXIT_CODES_EPILOG)
def status(
    state: StateOpt,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the status document as JSON.")] = False,
) -> None:
    """The rollout's weight, step, state and decisions, from the state file (no running controller needed)."""
    from specguard.canary.control.status import read_status
    from specguard.canary.state.store import CanaryStore

    with CanaryStore.open_existing(state) as store:
        doc = read_status(store)
    if doc is None:
        raise OptionError(f"--state {state}: the canary has not started yet (no state saved)")
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    print(f"{doc['state']}: candidate at {doc['weight']:g} %, step {doc['step'] + 1}, {doc['windows']} windows analysed")
    for d in doc["decisions"][-10:]:
        print(f"  {time.strftime('%H:%M:%S', time.localtime(d['time']))} {d['kind']}: {'; '.join(d['reasons'][:2])}")


@canary_app.command("events", epilog=EXIT_CODES_EPILOG)
def events(
    state: StateOpt,
    since: Annotated[int, typer.Option(min=0, help="From this event seq on.")] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="One JSON object per line (the JSONL log's lines).")
    ] = False,
) -> None:
    """The append-only event log: windows, decisions, critical conditions, manual actions, hooks."""
    from specguard.canary.state.store import CanaryStore

    with CanaryStore.open_existing(state) as store:
        log = store.events(since_seq=since)
    for e in log:
        if as_json:
            print(e.model_dump_json())
        else:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time))
            what = e.decision or e.kind
            print(f"{e.seq:>5} {when} {what:<9} {e.percent:>5g} %  {'; '.join(e.reasons[:2])}")


ActionJson = Annotated[
    bool,
    typer.Option(
        "--json", metavar="", help='Print the controller\'s answer as JSON (a refusal: {"error": ...} with exit_code 1).'
    ),
]


def _admin_call(rollout_file: Path, action: str, as_json: bool = False) -> None:
    from specguard.canary.control.admin import read_token
    from specguard.canary.spec.rollout import load_rollout, split_listen

    input_path(rollout_file, "ROLLOUT")
    rollout = load_rollout(rollout_file)
    token = read_token(rollout.admin)
    host, port = split_listen(rollout.admin.listen)
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    req = urllib.request.Request(f"http://{netloc}/{action}", method="POST", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            doc = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", errors="replace")
        message = json.loads(body).get("error", body) if body.startswith("{") else body
        if exc.code == 401:
            raise OptionError(f"the admin API refused the token from the rollout's admin settings: {message}") from exc
        if exc.code == 409:
            err.print(f"{action} refused: {message}")
            if as_json:  # the same shape as a failure's, with the code this outcome exits with
                print(json.dumps({"error": {"code": "refused", "message": str(message), "exit_code": int(ExitCode.NO_GO)}}))
            raise typer.Exit(ExitCode.NO_GO) from exc
        raise ServerError(f"the admin API answered {exc.code}: {message}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerError(f"no canary controller answers on {rollout.admin.listen}: {reason}") from exc
    if as_json:
        print(json.dumps(doc))
    else:
        print(f"{action}: {doc['state']} at {doc['weight']:g} % (step {doc['step'] + 1})")


@canary_app.command("pause", epilog=EXIT_CODES_EPILOG)
def pause(rollout_file: RolloutArg, as_json: ActionJson = False) -> None:
    """Hold the weight: no automatic advance or promotion (failing windows and critical conditions still roll back)."""
    _admin_call(rollout_file, "pause", as_json)


@canary_app.command("resume", epilog=EXIT_CODES_EPILOG)
def resume(rollout_file: RolloutArg, as_json: ActionJson = False) -> None:
    """Resume automatic analysis and steps after a pause."""
    _admin_call(rollout_file, "resume", as_json)


@canary_app.command("promote", epilog=EXIT_CODES_EPILOG)
def promote(rollout_file: RolloutArg, as_json: ActionJson = False) -> None:
    """Send all traffic to the candidate now and run the promotion hooks."""
    _admin_call(rollout_file, "promote", as_json)


@canary_app.command("rollback", epilog=EXIT_CODES_EPILOG)
def rollback(rollout_file: RolloutArg, as_json: ActionJson = False) -> None:
    """Roll back now: the weight drops to 0, streams in flight finish, the rollback hooks run."""
    _admin_call(rollout_file, "rollback", as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(canary_app, name="canary")


@canary_app.command("units", epilog=EXIT_CODES_EPILOG)
def units(
    rollout_file: RolloutArg,
    out: Annotated[Path, typer.Option(help="Directory for the .service files and RUNBOOK.md.")],
    force: Annotated[bool, typer.Option("--force", metavar="", help="Overwrite files that exist.")] = False,
    vllm_bin: Annotated[Path | None, typer.Option(help="The vllm executable of non-embedded pools (default: on PATH).")] = None,
    vllm_version: Annotated[str | None, typer.Option(help="The vLLM version to pin (default: what vllm --version says).")] = None,
    specguard_bin: Annotated[Path | None, typer.Option(help="The specguard executable the controller unit runs.")] = None,
    working_dir: Annotated[Path | None, typer.Option(help="The controller's working directory (default: here).")] = None,
    drain_timeout_s: Annotated[float, typer.Option(min=1, help="The controller's stop timeout (streams drain).")] = 300.0,
    exclusive: Annotated[
        bool, typer.Option("--exclusive", metavar="", help="Conflicts= between baseline and speculative (one GPU, no canary).")
    ] = False,
) -> None:
    """Write systemd units for the pools (from their launch specs) and the controller, and the rollback runbook."""
    from specguard.canary.ops.unit_specs import UnitOptions
    from specguard.canary.ops.units import write_units
    from specguard.canary.spec.rollout import load_rollout
    from specguard.validation import version_option

    input_path(rollout_file, "ROLLOUT")
    input_path(vllm_bin, "--vllm-bin")
    input_path(specguard_bin, "--specguard-bin")
    input_path(working_dir, "--working-dir", directory=True)
    version_option(vllm_version, "--vllm-version")
    rollout = load_rollout(rollout_file)
    options = UnitOptions(
        vllm_bin=vllm_bin,
        vllm_version=vllm_version,
        specguard_bin=specguard_bin,
        working_dir=working_dir,
        drain_timeout_s=drain_timeout_s,
        exclusive=exclusive,
    )
    paths = write_units(
        rollout, rollout_file, out, options, force=force, warn=lambda m: err.print(f"warning: {m}", highlight=False)
    )
    for p in paths:
        print(p)


@canary_app.command("report", epilog=EXIT_CODES_EPILOG)
def report(
    state: Annotated[Path, typer.Argument(help="The canary's SQLite state file.")],
    out: Annotated[Path | None, typer.Option(help="Directory for report.html and report.md (default: beside STATE).")] = None,
    force: Annotated[bool, typer.Option("--force", metavar="", help="Overwrite a report that exists.")] = False,
) -> None:
    """Write the rollout's HTML and Markdown report: weight over time, per-window ratios, decisions, hooks, pools."""
    from specguard.report.build.canary import read_canary_report_data, write_canary_report

    with_state = read_canary_report_data(state)
    for p in write_canary_report(with_state, out or state.resolve().parent / "report", force=force):
        print(p)


@canary_app.command("observability", epilog=EXIT_CODES_EPILOG)
def observability(
    rollout_file: RolloutArg,
    vllm_version: Annotated[str, typer.Option(help="The pools' vLLM release: metric names differ across releases.")],
    out: Annotated[Path, typer.Option(help="Directory for recording-rules.yaml, alerting-rules.yaml and dashboard.json.")],
    force: Annotated[bool, typer.Option("--force", metavar="", help="Overwrite files that exist.")] = False,
    with_tests: Annotated[
        bool,
        typer.Option(
            "--with-tests", metavar="", help="Also write rules-test.yaml: promtool tests that fire each alert and keep it quiet."
        ),
    ] = False,
    runbook_url: Annotated[
        str, typer.Option(help="Where RUNBOOK.md (canary units) is published; each alert's runbook_url is a section of it.")
    ] = "RUNBOOK.md",
) -> None:
    """Write Prometheus recording and alerting rules and a Grafana dashboard for the rollout's pools."""
    from specguard.canary.observability import dashboard_pin_for, write_observability
    from specguard.canary.spec.rollout import load_rollout
    from specguard.validation import version_option
    from specguard.vllm.knowledge import LATEST_KNOWN, parse_version, version_text

    input_path(rollout_file, "ROLLOUT")
    version_option(vllm_version, "--vllm-version")
    if not runbook_url or any(c.isspace() or c == "#" for c in runbook_url):
        raise OptionError(f"--runbook-url {runbook_url!r}: expected a URL or path without spaces or '#' (the section is added)")
    release = parse_version(vllm_version)
    rollout = load_rollout(rollout_file)
    if release > LATEST_KNOWN:
        err.print(f"warning: vLLM {vllm_version} is newer than specguard's tables: names as of {version_text(LATEST_KNOWN)}")
    for p in write_observability(rollout, release, out, force=force, runbook=runbook_url, with_tests=with_tests):
        print(p)
    pin = dashboard_pin_for(rollout, release)
    # On stderr, so that stdout stays one written path per line; 'grafana:' in the rollout records the same pin.
    err.print(f"dashboard uid {pin.uid}, version {pin.version}, sha256 {pin.sha256}", highlight=False, markup=False)


@canary_app.command("haproxy-config", epilog=EXIT_CODES_EPILOG)
def haproxy_config(
    rollout_file: RolloutArg,
    out: Annotated[Path, typer.Option(help="The haproxy.cfg file to write.")],
    force: Annotated[bool, typer.Option("--force", metavar="", help="Overwrite the file if it exists.")] = False,
    bind: Annotated[str, typer.Option(help="The frontend's address, host:port (the clients' endpoint).")] = "127.0.0.1:8080",
    timeout_server_s: Annotated[
        float, typer.Option(help="HAProxy's client and server timeouts: longer than the longest request.")
    ] = 1800.0,
) -> None:
    """Write the HAProxy configuration for a rollout with 'engine: haproxy': backend, stats socket, health checks."""
    from specguard.canary.ops.haproxy_config import write_haproxy_config
    from specguard.canary.spec.rollout import load_rollout

    input_path(rollout_file, "ROLLOUT")
    rollout = load_rollout(rollout_file)
    print(write_haproxy_config(rollout, out, force=force, bind=bind, timeout_server_s=timeout_server_s, source=str(rollout_file)))
