"""Running a check plan: the A/B matrix over both arms, block by block, into a check directory.

Launched arms cannot share one GPU, so they run one at a time on the same
port, the server restarted for every block: ``interleaved`` runs baseline
and candidate blocks alternately for each repetition (ABAB...), ``blocked``
runs all baseline repetitions first. Within a block every traffic level x
sampling setting x prompt source is one ``bench`` run (``CheckDir`` owns
where it is stored).

Everything a plan names (prompt files, synthetic sets, API-key variables,
the output directory) is resolved before the first block, so a check never
measures a baseline and then fails on the candidate. The state is written
after every block; an interrupt stops the check at once (``Interrupted``, no
verdict), and ``resume=True`` runs only the blocks not yet done, setting
aside the interrupted block's partial runs, and refuses a changed plan.

With ``baseline_runs`` (``check --baseline-run``) the baseline arm is not measured: every cell's baseline is
an existing run (``check.baseline``), checked against its cell before anything is sent, and only the
candidate's blocks run.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from specguard.analysis.definitions import HIGHER_IS_BETTER
from specguard.check.aggregate import cell_comparisons
from specguard.check.baseline import Baseline, baseline_inventory, resolve_baselines, write_baselines
from specguard.check.launch import Launcher, LaunchResolver
from specguard.check.plan import Arm, CheckPlan, TrafficLevel
from specguard.check.record import ArmInventory, CheckRecord, CheckState, block_name
from specguard.check.sweep import SweepRecord, SweepSpec, SweepStage, next_stage
from specguard.errors import Interrupted, OutputExistsError, RuntimeFailure, UsageError
from specguard.inventory.collect import from_server, from_spec
from specguard.lifetime import set_cpus
from specguard.loadgen.prompts import PromptSet, load_prompts
from specguard.loadgen.recorder import OutputMode
from specguard.loadgen.runner import (
    PROBE_TIMEOUT_S,
    BenchConfig,
    MatrixProgress,
    check_model_served,
    run_async,
    run_bench,
)
from specguard.results.check_dir import ARMS, CheckDir, cell_key
from specguard.results.models import SamplingOverrides
from specguard.results.run_dir import RunDir, load_summary
from specguard.results.store import read_json, write_json_atomic
from specguard.server_metrics.server_facts import inspect_server
from specguard.validation import api_key_from_env
from specguard.verdict import Failure
from specguard.verdict.decide import cell_status
from specguard.vllm.process import ManagedServer, ServerStartError, free_port, log_tail
from specguard.vllm.server_spec import redact_argv
from specguard.vllm.urls import server_root

__all__ = [
    "ARMS",
    "ArmInventory",
    "CheckRuntimeError",
    "blocks",
    "cell_key",
    "check_endpoint_models",
    "resolve_plan",
    "run_check",
    "validate_check",
]

OOM_MARKERS = ("out of memory", "OutOfMemoryError", "CUDA error: out of memory", "Cannot allocate memory")


class CheckRuntimeError(RuntimeFailure):
    """The check could not be carried out (a server that would not start, an endpoint that vanished)."""


@dataclass
class ResolvedPlan:
    """A plan with everything it names resolved: prompt sets loaded, API keys read, imported baselines matched."""

    plan: CheckPlan
    plan_path: Path
    prompt_sets: list[PromptSet]
    api_keys: dict[str, str | None]
    baselines: dict[str, Baseline] = field(default_factory=dict)  # cell key -> its imported baseline run
    baseline_args: tuple[str, ...] = ()  # --baseline-run as given, for the commands that continue the check

    @property
    def sha256(self) -> str:
        """The plan as validated, with its prompts' content (and imported baselines): a resumed check must measure the same."""
        h = hashlib.sha256(self.plan.model_dump_json().encode())
        for ps in self.prompt_sets:
            h.update(f"{ps.source}\0{ps.sha256}\0{ps.generator}\0".encode())
        for key, b in sorted(self.baselines.items()):
            h.update(f"baseline\0{key}\0{b.record.sha256}\0".encode())
        return h.hexdigest()

    @property
    def arms(self) -> tuple[str, ...]:
        """The arms the check measures: the candidate alone when the baseline is imported."""
        return ("candidate",) if self.baselines else ARMS

    @property
    def resume_command(self) -> str:
        given = "".join(f" --baseline-run {shlex.quote(a)}" for a in self.baseline_args)
        return f"specguard check {self.plan_path}{given}"


def resolve_plan(plan: CheckPlan, plan_path: Path, baseline_runs: Sequence[str] = ()) -> ResolvedPlan:
    """Load every prompt source, read every API-key variable and match every imported baseline with its cell;
    raise before anything is measured or written."""
    prompt_sets = [
        load_prompts(p.source, seed=plan.seed, max_tokens=plan.max_tokens, count=p.count, options=p.options())
        for p in plan.prompts
    ]
    baselines = resolve_baselines(plan, prompt_sets, baseline_runs)
    keys: dict[str, str | None] = {}
    for name in ARMS:
        ep = getattr(plan.arms, name).endpoint
        if ep is None or (name == "baseline" and baselines):  # an imported baseline asks no server
            keys[name] = None
        else:
            keys[name] = api_key_from_env(ep.api_key_env, f"arms.{name}.endpoint.api_key_env")
    return ResolvedPlan(
        plan=plan,
        plan_path=plan_path,
        prompt_sets=prompt_sets,
        api_keys=keys,
        baselines=baselines,
        baseline_args=tuple(baseline_runs),
    )


def blocks(plan: CheckPlan, arms: Sequence[str] = ARMS) -> list[tuple[int, str]]:
    reps = range(1, plan.repetitions + 1)
    if plan.order == "interleaved":
        return [(r, arm) for r in reps for arm in arms]
    return [(r, arm) for arm in arms for r in reps]


def _open_state(d: CheckDir, resolved: ResolvedPlan, resume: bool) -> CheckState:
    """A new check's state in a new directory, or, with ``resume``, the state of the same plan's interrupted check."""
    if not resume:
        if d.root.exists() and (not d.root.is_dir() or any(d.root.iterdir())):
            raise OutputExistsError(
                f"--out {d.root}: already exists and is not empty; choose a new directory, or pass "
                "--resume to continue the check stored there"
            )
        if resolved.plan.sweep is not None:  # blocks grow as the sweep chooses its stages
            return CheckState(plan_sha256=resolved.sha256, blocks=[], sweep=SweepRecord())
        arms = resolved.arms
        return CheckState(plan_sha256=resolved.sha256, blocks=[block_name(r, a) for r, a in blocks(resolved.plan, arms)])
    if not d.state_json.exists():
        raise UsageError(f"--resume: {d.root} holds no check state ({d.state_json.name}); nothing to resume")
    state = read_json(d.state_json, CheckState)
    if state.plan_sha256 != resolved.sha256:
        raise UsageError(
            f"--resume: the plan (or its prompts, or its --baseline-run runs) changed since the check in {d.root} "
            "started; give the same plan and --baseline-run arguments, or run it in a new --out directory"
        )
    return state


def validate_check(
    plan: CheckPlan, plan_path: Path, out: Path, *, resume: bool = False, baseline_runs: Sequence[str] = ()
) -> tuple[ResolvedPlan, CheckState]:
    """Everything a check checks on this machine before it asks a server anything: prompt files, API-key
    variables, imported baselines and ``--out`` (new, or with ``resume`` the same plan's check). Reads only;
    ``check --dry-run`` calls it too, so a plan the check would refuse is refused by its dry run."""
    resolved = resolve_plan(plan, plan_path, baseline_runs)
    return resolved, _open_state(CheckDir(out), resolved, resume)


def check_endpoint_models(resolved: ResolvedPlan) -> None:
    """Every endpoint arm's server serves the plan's model: asked (``/v1/models``) before the first block.

    Each run asks it again, but a wrong candidate model was found only after the whole baseline block had run.
    A server that does not answer is left to the block, which reports it with the requests that failed.
    """
    for name in resolved.arms:
        ep = getattr(resolved.plan.arms, name).endpoint
        if ep is not None:
            served = inspect_server(ep.base_url, resolved.api_keys[name], PROBE_TIMEOUT_S, read_metrics=False).served_names
            check_model_served(ep.model, served, server_root(ep.base_url), f"arms.{name}.endpoint.model")


def run_check(
    plan: CheckPlan,
    plan_path: Path,
    out: Path,
    *,
    launcher: LaunchResolver,
    resume: bool = False,
    log: Callable[[str], None] = print,
    progress: MatrixProgress | None = None,
    baseline_runs: Sequence[str] = (),
    then: Callable[[_Run], None] | None = None,
) -> CheckRecord:
    """Run (or resume) every block of the plan into ``out``; return the record the verdict is built from.

    ``launcher`` gives the runtime and resolved specs of launched arms, asked only if a launched block runs;
    ``progress`` follows blocks, runs and requests (the CLI draws it on stderr); ``baseline_runs`` are the
    ``--baseline-run`` arguments: the baseline imported from them, not measured (``check.baseline``).
    """
    progress = progress or MatrixProgress()
    resolved, state = validate_check(plan, plan_path, out, resume=resume, baseline_runs=baseline_runs)
    check_endpoint_models(resolved)
    d = CheckDir(out)
    d.root.mkdir(parents=True, exist_ok=True)
    if resolved.baselines:
        write_baselines(d, resolved.baselines)
        state.inventory.setdefault("baseline", baseline_inventory(resolved.baselines))
        log(f"baseline imported, not measured: {len(resolved.baselines)} cell(s); measuring the candidate only")
    run = _Run(resolved, d, state, launcher, log, progress)
    run.save()
    if resume:
        log(f"resuming: {len(state.done)} of {len(state.blocks)} blocks done, {len(state.missing)} to run or choose")
    if plan.sweep is None:
        run.stage(None, plan.levels)
    else:
        _run_sweep(run, plan.sweep)
    if then is not None:  # check --until-decided: its further looks (check.until_decided.run_until_decided)
        then(run)
    return run.record


@dataclass
class _Run:
    """One check being run: its state, written after every block, and the launcher asked for once."""

    resolved: ResolvedPlan
    d: CheckDir
    state: CheckState
    launcher: LaunchResolver
    log: Callable[[str], None]
    progress: MatrixProgress
    launch: Launcher | None = None
    port: int = 0

    @property
    def record(self) -> CheckRecord:
        s = self.state
        return CheckRecord(
            plan_path=str(self.resolved.plan_path),
            plan=self.resolved.plan,
            plan_sha256=s.plan_sha256,
            inventory=s.inventory,
            failures=s.failures,
            sweep=s.sweep,
            baseline_imports=[b.record for b in self.resolved.baselines.values()],
            repetitions_run=s.repetitions_run,
            looks=s.looks,
        )

    def save(self) -> None:
        write_json_atomic(self.d.state_json, self.state)
        write_json_atomic(self.d.check_json, self.record)

    def stage(self, stage: str | None, levels: list[TrafficLevel], reps: Sequence[int] | None = None) -> None:
        """Every block of a stage (a list plan's one stage: None) not yet done, over ``levels``.

        ``reps``: only these repetitions, interleaved (a sequential check's further ones); default the plan's.
        """
        plan, state, d = self.resolved.plan, self.state, self.d
        planned = blocks(plan, self.resolved.arms) if reps is None else [(r, a) for r in reps for a in self.resolved.arms]
        todo = [(rep, arm) for rep, arm in planned if block_name(rep, arm, stage) not in state.done]
        arms = {"baseline": plan.arms.baseline, "candidate": plan.arms.candidate}
        if self.launch is None and any(arms[a].launch is not None for _, a in todo):
            self.launch = self.launcher(plan, self.log)
        if not self.port:
            self.port = free_port()
        if todo:  # a sweep's stages each count their own blocks, runs and requests
            reps = [r for r, _ in todo]
            runs = len(todo) * runs_per_block(self.resolved, levels)
            requests = requests_to_run(self.resolved, levels, reps)
            self.progress.matrix_started(len(todo), runs, requests)
            expected = requests_to_run(self.resolved, levels, reps, expected=True) if requests is None else None
            if expected is not None:
                self.progress.requests_expected(expected)
        for rep, arm_name in todo:
            name = block_name(rep, arm_name, stage)
            keys = None if stage is None else _cell_keys(plan, levels)
            _set_aside_partial_runs(d, arm_name, rep, self.log, keys)
            self.log(f"block: {'' if stage is None else stage + ', '}repetition {rep}, {arm_name}")
            self.progress.block_started(name)
            arm = arms[arm_name]
            try:
                if arm.launch is not None:
                    assert self.launch is not None
                    port = arm.launch.port or self.port
                    launch = self.launch
                    _run_launched_block(self.resolved, d, state, arm, arm_name, rep, launch, port, levels, name, self.progress)
                else:
                    _run_endpoint_block(self.resolved, d, state, arm, arm_name, rep, levels, name, self.progress)
            except KeyboardInterrupt as exc:  # between runs (a server starting): the same stop as within one
                raise Interrupted(interrupted_message(self.resolved, d, name)) from exc
            self.progress.block_finished()
            state.done.append(name)
            self.save()


def _cell_keys(plan: CheckPlan, levels: list[TrafficLevel]) -> list[str]:
    return [cell_key(t.name, s.name, i) for t in levels for s in plan.sampling for i in range(len(plan.prompts))]


def _run_sweep(run: _Run, spec: SweepSpec) -> None:
    """Measure the stages chosen so far (a resumed check: those not done), then choose and measure the next."""
    sweep = run.state.sweep
    assert sweep is not None
    plan = run.resolved.plan
    while True:
        for st in sweep.stages:
            run.stage(st.name, plan.with_levels(st.levels).levels)
            if st.name == "probe":
                _fill_probe_rates(run, st)
        if sweep.finished:
            return
        paid = _paid(plan, sweep, run.d.root) if any(s.name == "rates" for s in sweep.stages) else {}
        nxt = next_stage(spec, sweep, paid)
        if isinstance(nxt, str):
            sweep.finished, sweep.note = True, nxt
            run.log(f"sweep: {nxt}")
        else:
            sweep.stages.append(nxt)
            run.state.blocks += [block_name(r, a, nxt.name) for r, a in blocks(plan)]
            run.log(f"sweep stage {nxt.name}: {nxt.reason}")
        run.save()


def _fill_probe_rates(run: _Run, probe: SweepStage) -> None:
    """A probe's requests/s as the baseline reached it: the mean over its runs (every cell, every repetition)."""
    plan, d = run.resolved.plan, run.d
    if all(lv.load_rps is not None for lv in probe.levels):
        return
    for lv in probe.levels:
        if lv.load_rps is not None:
            continue
        keys = [cell_key(lv.name, s.name, i) for s in plan.sampling for i in range(len(plan.prompts))]
        rates = [load_summary(r).request_rate for k in keys for r in d.measured_runs("baseline", k, plan.repetitions)]
        if not rates or max(rates) <= 0:
            raise CheckRuntimeError(f"sweep: the baseline completed no request at the '{lv.name}' probe; no rate to sweep")
        lv.load_rps = sum(rates) / len(rates)
    probe.reason += "; measured: " + ", ".join(f"{lv.name} {lv.load_rps:.3g} requests/s" for lv in probe.levels)
    run.save()


def _paid(plan: CheckPlan, sweep: SweepRecord, out: Path) -> dict[str, bool]:
    """Per measured level: did speculation pay there, its objective better in every sampling x segment cell?"""
    higher = plan.objective.metric in HIGHER_IS_BETTER
    cells = cell_comparisons(plan.with_levels(sweep.levels), out)
    paid: dict[str, bool] = {}
    for c in cells:
        paid[c.traffic] = paid.get(c.traffic, True) and cell_status(c, higher) == "better"
    return paid


def runs_per_block(resolved: ResolvedPlan, levels: Sequence[TrafficLevel]) -> int:
    plan = resolved.plan
    return len(levels) * len(plan.sampling) * len(resolved.prompt_sets)


def requests_to_run(
    resolved: ResolvedPlan, levels: Sequence[TrafficLevel], reps: Sequence[int], *, expected: bool = False
) -> int | None:
    """The measured requests of the given blocks (by repetition), or None when a traffic level is timed.

    ``expected``: a level timed at a rate counts its expected arrivals (rate x duration; Poisson, so about), and
    only a timed closed loop (concurrency for a duration) leaves the total unknown.
    """
    plan = resolved.plan
    total = 0
    for rep in reps:
        for traffic in levels:
            n = traffic.load_shape(plan.warmup, plan.seed + rep).num_requests
            if n is None and expected and traffic.rate is not None and traffic.duration_s is not None:
                n = round(traffic.rate * traffic.duration_s)
            if n is None:
                return None
            total += n * len(plan.sampling) * len(resolved.prompt_sets)
    return total


def interrupted_message(resolved: ResolvedPlan, d: CheckDir, block: str) -> str:
    return f"interrupted in the {block} block; no verdict. Continue with: {resolved.resume_command} --out {d.root} --resume"


def _set_aside_partial_runs(d: CheckDir, arm: str, rep: int, log: Callable[[str], None], keys: list[str] | None) -> None:
    """An interrupted block's runs are kept, out of the way: never reused, never overwritten.

    A sweep stage's block shares its directory with earlier stages: only its own cells (``keys``) move.
    """
    block = d.block_dir(arm, rep)
    if keys is not None:
        partial = [d.run_dir(arm, rep, k) for k in keys if d.run_dir(arm, rep, k).exists()]
        if partial:
            target = d.interrupted_block_dir(arm, rep)
            target.mkdir(parents=True, exist_ok=True)
            for run in partial:
                run.rename(target / run.name)
            log(f"the interrupted block's partial runs ({arm} rep{rep}) are kept in {target}; running it again")
        return
    if block.exists() and any(block.iterdir()):
        target = d.interrupted_block_dir(arm, rep)
        target.parent.mkdir(parents=True, exist_ok=True)
        block.rename(target)
        log(f"the interrupted {block_name(rep, arm)} block's partial runs are kept in {target}; running it again")


def _run_launched_block(
    resolved: ResolvedPlan,
    d: CheckDir,
    state: CheckState,
    arm: Arm,
    arm_name: str,
    rep: int,
    launch: Launcher,
    port: int,
    levels: list[TrafficLevel],
    block: str,
    progress: MatrixProgress,
) -> None:
    assert arm.launch is not None
    spec = launch.specs[arm_name].model_copy(update={"port": port})
    log_path, timeout = d.server_log(arm_name, rep), arm.launch.startup_timeout_s
    server = (
        launch.server(arm_name, spec, log_path, timeout)
        if launch.server is not None
        else ManagedServer(spec, launch.serve_argv, log_path, runtime_env=launch.env, startup_timeout_s=timeout)
    )
    previous_cpus = os.sched_getaffinity(0) if launch.client_cpus else None
    try:
        set_cpus(set(launch.client_cpus or ()))  # the client off the server's cores (embedded/cpus.py)
        try:
            server.start()
            server.wait_ready()
        except ServerStartError as exc:
            raise CheckRuntimeError(f"the {arm_name} server would not start:\n{exc}") from exc
        if arm_name not in state.inventory:
            pinned = from_spec(spec, inspect_server(server.base_url), f"launched arm '{arm_name}'")
            state.inventory[arm_name] = ArmInventory(
                arm=arm_name,
                kind="launched",
                model=spec.name,
                speculative_config=spec.speculative_config,
                max_model_len=spec.max_model_len,
                command=redact_argv(server.argv),
                pinned=pinned,
            )
        where = (server.base_url, spec.name, server.metrics_url, None)
        _run_block(resolved, d, state, arm_name, rep, where, levels, block, server, progress=progress)
    finally:
        server.stop()
        set_cpus(previous_cpus)


def _run_endpoint_block(
    resolved: ResolvedPlan,
    d: CheckDir,
    state: CheckState,
    arm: Arm,
    arm_name: str,
    rep: int,
    levels: list[TrafficLevel],
    block: str,
    progress: MatrixProgress,
) -> None:
    ep = arm.endpoint
    assert ep is not None
    api_key = resolved.api_keys[arm_name]
    if arm_name not in state.inventory:
        pinned = from_server(inspect_server(ep.base_url, api_key), None, None)
        state.inventory[arm_name] = ArmInventory(arm=arm_name, kind="endpoint", model=ep.model, pinned=pinned)
    metrics = ep.metrics_url or f"{server_root(ep.base_url)}/metrics"
    where = (ep.base_url, ep.model, metrics, api_key)
    _run_block(resolved, d, state, arm_name, rep, where, levels, block, None, ep.gpu_metrics_url, progress)


def _run_block(
    resolved: ResolvedPlan,
    d: CheckDir,
    state: CheckState,
    arm: str,
    rep: int,
    where: tuple[str, str, str, str | None],
    levels: list[TrafficLevel],
    block: str,
    server: ManagedServer | None,
    gpu_metrics_url: str | None = None,
    progress: MatrixProgress | None = None,
) -> None:
    """One block: every level x sampling setting x prompt source; ``where`` is (base URL, model, metrics URL, key)."""
    plan = resolved.plan
    plan_arm: Arm = getattr(plan.arms, arm)
    base_url, model, metrics_url, api_key = where
    progress = progress or MatrixProgress()
    only = state.block_cells.get(block)  # a sequential check's further block: its undecided cells (None: all)
    for traffic in levels:
        for sampling in plan.sampling:
            for i, prompts in enumerate(resolved.prompt_sets):
                key = cell_key(traffic.name, sampling.name, i)
                if only is not None and key not in only:
                    continue
                run_dir = d.run_dir(arm, rep, key)
                cfg = BenchConfig(
                    base_url=base_url,
                    model=model,
                    api=plan.api,
                    prompts=prompts,
                    load=traffic.load_shape(plan.warmup, plan.seed + rep),
                    sampling=SamplingOverrides(
                        temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=plan.max_tokens
                    ),
                    metrics_url=metrics_url,
                    gpu_metrics_url=gpu_metrics_url,
                    out_dir=run_dir,
                    api_key=api_key,
                    default_max_tokens=plan.max_tokens,
                    slo=plan.slo,
                    headers=plan_arm.headers,
                    extra_body=plan_arm.extra_body,
                    labels=plan.labels,
                    outputs=_outputs_mode(plan, sampling.temperature),
                )
                progress.run_started(f"{arm} rep{rep} {traffic.name} / {sampling.name} / prompts {i}")
                summary = run_async(run_bench(cfg, progress))
                progress.run_finished()
                if summary.interrupted:
                    raise Interrupted(interrupted_message(resolved, d, block))
                oom = [
                    r.error
                    for r in RunDir(run_dir).records()
                    if r.error and any(m.lower() in r.error.lower() for m in OOM_MARKERS)
                ]
                if oom:
                    state.failures.append(Failure(arm=arm, kind="oom", detail=f"{len(oom)} requests: {oom[0][:200]}"))
                if summary.requests and summary.errors == summary.requests and server is None:
                    raise CheckRuntimeError(f"{arm}: every request to {base_url} failed; the endpoint is gone?")
                if server is not None and not server.running():
                    _record_failure(state, arm, server)
                    return


def _outputs_mode(plan: CheckPlan, temperature: float) -> OutputMode:
    """Outputs kept when the plan says so; compared (then forgotten) where decoding is greedy; else not asked for."""
    if plan.keep_output:
        return "keep"
    return "compare" if temperature == 0 else "off"


def _record_failure(state: CheckState, arm: str, server: ManagedServer) -> None:
    tail = log_tail(server.log_path, 60)
    kind: Literal["oom", "crash"] = "oom" if any(m in tail for m in OOM_MARKERS) else "crash"
    if arm == "baseline":
        raise CheckRuntimeError(f"the baseline server died during the measurements:\n{tail}")
    code = server.proc.returncode if server.proc is not None else None
    state.failures.append(Failure(arm=arm, kind=kind, detail=f"exit code {code}; log {server.log_path}"))
