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
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specguard.check.launch import Launcher, LaunchResolver
from specguard.check.plan import Arm, CheckPlan
from specguard.check.record import ArmInventory, CheckRecord, CheckState
from specguard.errors import Interrupted, OutputExistsError, RuntimeFailure, UsageError
from specguard.inventory.collect import from_server, from_spec
from specguard.loadgen.prompts import PromptSet, load_prompts
from specguard.loadgen.runner import BenchConfig, MatrixProgress, run_async, run_bench
from specguard.results.check_dir import ARMS, CheckDir, cell_key
from specguard.results.models import RequestRecord, SamplingOverrides
from specguard.results.store import REQUESTS_FILE, read_json, read_jsonl, write_json_atomic
from specguard.server_metrics.server_facts import inspect_server
from specguard.validation import api_key_from_env
from specguard.verdict import Failure
from specguard.vllm.process import ManagedServer, ServerStartError, free_port, log_tail
from specguard.vllm.server_spec import redact_argv
from specguard.vllm.urls import server_root

__all__ = [
    "ARMS",
    "ArmInventory",
    "CheckRuntimeError",
    "blocks",
    "cell_key",
    "resolve_plan",
    "run_check",
]

OOM_MARKERS = ("out of memory", "OutOfMemoryError", "CUDA error: out of memory", "Cannot allocate memory")


class CheckRuntimeError(RuntimeFailure):
    """The check could not be carried out (a server that would not start, an endpoint that vanished)."""


@dataclass
class ResolvedPlan:
    """A plan with everything it names resolved: prompt sets loaded, API keys read."""

    plan: CheckPlan
    plan_path: Path
    prompt_sets: list[PromptSet]
    api_keys: dict[str, str | None]

    @property
    def sha256(self) -> str:
        """The plan as validated, with its prompts' content: a resumed check must measure the same thing."""
        h = hashlib.sha256(self.plan.model_dump_json().encode())
        for ps in self.prompt_sets:
            h.update(f"{ps.source}\0{ps.sha256}\0{ps.generator}\0".encode())
        return h.hexdigest()


def resolve_plan(plan: CheckPlan, plan_path: Path) -> ResolvedPlan:
    """Load every prompt source and read every API-key variable; raise before anything is measured or written."""
    prompt_sets = [
        load_prompts(p.source, seed=plan.seed, max_tokens=plan.max_tokens, count=p.count, options=p.options())
        for p in plan.prompts
    ]
    keys: dict[str, str | None] = {}
    for name in ARMS:
        ep = getattr(plan.arms, name).endpoint
        keys[name] = api_key_from_env(ep.api_key_env, f"arms.{name}.endpoint.api_key_env") if ep is not None else None
    return ResolvedPlan(plan=plan, plan_path=plan_path, prompt_sets=prompt_sets, api_keys=keys)


def blocks(plan: CheckPlan) -> list[tuple[int, str]]:
    reps = range(1, plan.repetitions + 1)
    if plan.order == "interleaved":
        return [(r, arm) for r in reps for arm in ARMS]
    return [(r, arm) for arm in ARMS for r in reps]


def block_name(rep: int, arm: str) -> str:
    return f"{arm} rep{rep}"


def _open_state(d: CheckDir, resolved: ResolvedPlan, resume: bool) -> CheckState:
    """A new check's state in a new directory, or, with ``resume``, the state of the same plan's interrupted check."""
    if not resume:
        if d.root.exists() and (not d.root.is_dir() or any(d.root.iterdir())):
            raise OutputExistsError(
                f"--out {d.root}: already exists and is not empty; choose a new directory, or pass "
                "--resume to continue the check stored there"
            )
        return CheckState(plan_sha256=resolved.sha256, blocks=[block_name(r, a) for r, a in blocks(resolved.plan)])
    if not d.state_json.exists():
        raise UsageError(f"--resume: {d.root} holds no check state ({d.state_json.name}); nothing to resume")
    state = read_json(d.state_json, CheckState)
    if state.plan_sha256 != resolved.sha256:
        raise UsageError(
            f"--resume: the plan (or its prompts) changed since the check in {d.root} started; run it in a new --out directory"
        )
    return state


def run_check(
    plan: CheckPlan,
    plan_path: Path,
    out: Path,
    *,
    launcher: LaunchResolver,
    resume: bool = False,
    log: Callable[[str], None] = print,
    progress: MatrixProgress | None = None,
) -> CheckRecord:
    """Run (or resume) every block of the plan into ``out``; return the record the verdict is built from.

    ``launcher`` gives the runtime and resolved specs of launched arms, asked only if a launched block runs;
    ``progress`` follows blocks, runs and requests (the CLI draws it on stderr).
    """
    progress = progress or MatrixProgress()
    resolved = resolve_plan(plan, plan_path)
    d = CheckDir(out)
    state = _open_state(d, resolved, resume)
    d.root.mkdir(parents=True, exist_ok=True)
    record = CheckRecord(
        plan_path=str(plan_path), plan=plan, plan_sha256=state.plan_sha256, inventory=state.inventory, failures=state.failures
    )
    write_json_atomic(d.check_json, record)
    write_json_atomic(d.state_json, state)
    todo = [(rep, arm) for rep, arm in blocks(plan) if block_name(rep, arm) not in state.done]
    if resume:
        log(f"resuming: {len(state.done)} of {len(state.blocks)} blocks done, {len(todo)} to run")
    progress.matrix_started(len(todo), len(todo) * runs_per_block(resolved), requests_to_run(resolved, [r for r, _ in todo]))
    arms = {"baseline": plan.arms.baseline, "candidate": plan.arms.candidate}
    launch: Launcher | None = None
    if todo and any(arms[a].launch is not None for _, a in todo):
        launch = launcher(plan, log)
    port = free_port()
    for rep, arm_name in todo:
        _set_aside_partial_runs(d, arm_name, rep, log)
        log(f"block: repetition {rep}, {arm_name}")
        progress.block_started(block_name(rep, arm_name))
        arm = arms[arm_name]
        try:
            if arm.launch is not None:
                assert launch is not None
                _run_launched_block(resolved, d, state, arm, arm_name, rep, launch, arm.launch.port or port, progress)
            else:
                _run_endpoint_block(resolved, d, state, arm, arm_name, rep, progress)
        except KeyboardInterrupt as exc:  # between runs (a server starting): the same stop as within one
            raise Interrupted(interrupted_message(resolved, d, rep, arm_name)) from exc
        progress.block_finished()
        state.done.append(block_name(rep, arm_name))
        write_json_atomic(d.state_json, state)
        record = record.model_copy(update={"inventory": state.inventory, "failures": state.failures})
        write_json_atomic(d.check_json, record)
    return record


def runs_per_block(resolved: ResolvedPlan) -> int:
    plan = resolved.plan
    return len(plan.traffic) * len(plan.sampling) * len(resolved.prompt_sets)


def requests_to_run(resolved: ResolvedPlan, reps: Sequence[int]) -> int | None:
    """The measured requests of the given blocks (by repetition), or None when a traffic level is timed."""
    plan = resolved.plan
    total = 0
    for rep in reps:
        for traffic in plan.traffic:
            n = traffic.load_shape(plan.warmup, plan.seed + rep).num_requests
            if n is None:
                return None
            total += n * len(plan.sampling) * len(resolved.prompt_sets)
    return total


def interrupted_message(resolved: ResolvedPlan, d: CheckDir, rep: int, arm: str) -> str:
    return (
        f"interrupted in the {block_name(rep, arm)} block; no verdict. Continue with: "
        f"specguard check {resolved.plan_path} --out {d.root} --resume"
    )


def _set_aside_partial_runs(d: CheckDir, arm: str, rep: int, log: Callable[[str], None]) -> None:
    """An interrupted block's runs are kept, out of the way: never reused, never overwritten."""
    block = d.block_dir(arm, rep)
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
    progress: MatrixProgress,
) -> None:
    assert arm.launch is not None
    spec = launch.specs[arm_name].model_copy(update={"port": port})
    server = ManagedServer(
        spec,
        launch.serve_argv,
        d.server_log(arm_name, rep),
        runtime_env=launch.env,
        startup_timeout_s=arm.launch.startup_timeout_s,
    )
    try:
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
        _run_block(
            resolved, d, state, arm_name, rep, server.base_url, spec.name, server.metrics_url, None, server, progress=progress
        )
    finally:
        server.stop()


def _run_endpoint_block(
    resolved: ResolvedPlan, d: CheckDir, state: CheckState, arm: Arm, arm_name: str, rep: int, progress: MatrixProgress
) -> None:
    ep = arm.endpoint
    assert ep is not None
    api_key = resolved.api_keys[arm_name]
    if arm_name not in state.inventory:
        pinned = from_server(inspect_server(ep.base_url, api_key), None, None)
        state.inventory[arm_name] = ArmInventory(arm=arm_name, kind="endpoint", model=ep.model, pinned=pinned)
    metrics = ep.metrics_url or f"{server_root(ep.base_url)}/metrics"
    _run_block(resolved, d, state, arm_name, rep, ep.base_url, ep.model, metrics, api_key, None, ep.gpu_metrics_url, progress)


def _run_block(
    resolved: ResolvedPlan,
    d: CheckDir,
    state: CheckState,
    arm: str,
    rep: int,
    base_url: str,
    model: str,
    metrics_url: str,
    api_key: str | None,
    server: ManagedServer | None,
    gpu_metrics_url: str | None = None,
    progress: MatrixProgress | None = None,
) -> None:
    plan = resolved.plan
    progress = progress or MatrixProgress()
    for traffic in plan.traffic:
        for sampling in plan.sampling:
            for i, prompts in enumerate(resolved.prompt_sets):
                run_dir = d.run_dir(arm, rep, cell_key(traffic.name, sampling.name, i))
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
                )
                progress.run_started(f"{arm} rep{rep} {traffic.name} / {sampling.name} / prompts {i}")
                summary = run_async(run_bench(cfg, progress))
                progress.run_finished()
                if summary.interrupted:
                    raise Interrupted(interrupted_message(resolved, d, rep, arm))
                oom = [
                    r.error
                    for r in read_jsonl(run_dir / REQUESTS_FILE, RequestRecord)
                    if r.error and any(m.lower() in r.error.lower() for m in OOM_MARKERS)
                ]
                if oom:
                    state.failures.append(Failure(arm=arm, kind="oom", detail=f"{len(oom)} requests: {oom[0][:200]}"))
                if summary.requests and summary.errors == summary.requests and server is None:
                    raise CheckRuntimeError(f"{arm}: every request to {base_url} failed; the endpoint is gone?")
                if server is not None and not server.running():
                    _record_failure(state, arm, server)
                    return


def _record_failure(state: CheckState, arm: str, server: ManagedServer) -> None:
    tail = log_tail(server.log_path, 60)
    kind: Literal["oom", "crash"] = "oom" if any(m in tail for m in OOM_MARKERS) else "crash"
    if arm == "baseline":
        raise CheckRuntimeError(f"the baseline server died during the measurements:\n{tail}")
    code = server.proc.returncode if server.proc is not None else None
    state.failures.append(Failure(arm=arm, kind=kind, detail=f"exit code {code}; log {server.log_path}"))
