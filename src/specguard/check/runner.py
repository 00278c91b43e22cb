"""Running a check plan: the A/B matrix over both arms, block by block, into a check directory.

Launched arms cannot share one GPU, so they run one at a time on the same
port, the server restarted for every block: ``interleaved`` runs baseline
and candidate blocks alternately for each repetition (ABAB...), ``blocked``
runs all baseline repetitions first. Within a block every traffic level x
sampling setting x prompt source is one ``bench`` run, stored as
``runs/ARM/repN/TRAFFIC__SAMPLING__pI/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from specguard.check.plan import Arm, CheckPlan
from specguard.check.verdict import Failure
from specguard.embedded.models import ModelSet, ensure_models
from specguard.embedded.runtime import VllmRuntime, ensure_runtime
from specguard.embedded.servers import EMBEDDED_SERVER_ENV, SERVED_NAME
from specguard.inventory.collect import from_server, from_spec
from specguard.inventory.model import Inventory
from specguard.loadgen.prompts import PromptSet, load_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.results.models import RequestRecord, SamplingOverrides
from specguard.results.store import REQUESTS_FILE, read_jsonl
from specguard.server_metrics.server_facts import inspect_server, server_root
from specguard.vllm.process import ManagedServer, ServerStartError, free_port, log_tail
from specguard.vllm.server_spec import ServerSpec, redact_argv

ARMS = ("baseline", "candidate")
OOM_MARKERS = ("out of memory", "OutOfMemoryError", "CUDA error: out of memory", "Cannot allocate memory")


class CheckRuntimeError(RuntimeError):
    """The check could not be carried out (a server that would not start, an endpoint that vanished)."""


class ArmInventory(BaseModel):
    arm: str
    kind: str
    model: str
    vllm_version: str | None = None
    speculative_config: dict[str, object] | None = None
    max_model_len: int | None = None
    hardware: dict[str, str] = {}
    command: list[str] | None = None
    pinned: Inventory | None = Field(default=None, description="the Gate 3 inventory, recorded when the arm first ran")


@dataclass
class CheckRun:
    plan: CheckPlan
    out: Path
    failures: list[Failure] = field(default_factory=list)
    inventory: dict[str, ArmInventory] = field(default_factory=dict)


def cell_key(traffic: str, sampling: str, source_index: int) -> str:
    return f"{traffic}__{sampling}__p{source_index}"


def blocks(plan: CheckPlan) -> list[tuple[int, str]]:
    reps = range(1, plan.repetitions + 1)
    if plan.order == "interleaved":
        return [(r, arm) for r in reps for arm in ARMS]
    return [(r, arm) for arm in ARMS for r in reps]


def server_spec_for(arm: Arm, models: ModelSet | None, port: int) -> ServerSpec:
    assert arm.launch is not None
    spec = arm.launch.model_dump(exclude={"startup_timeout_s"})
    spec["port"] = port
    if spec["model"].startswith("embedded:"):
        assert models is not None
        spec["model"] = str(models.path(spec["model"].split(":", 1)[1]))
        spec["served_model_name"] = spec["served_model_name"] or SERVED_NAME
        spec["env"] = {**EMBEDDED_SERVER_ENV, **spec["env"]}
    cfg = spec.get("speculative_config")
    if cfg and isinstance(cfg.get("model"), str) and cfg["model"].startswith("embedded:"):
        assert models is not None
        spec["speculative_config"] = {**cfg, "model": str(models.path(cfg["model"].split(":", 1)[1]))}
    return ServerSpec.model_validate(spec)


def uses_embedded(plan: CheckPlan) -> bool:
    launches = [a.launch for a in (plan.arms.baseline, plan.arms.candidate) if a.launch is not None]
    return any("embedded:" in launch.model_dump_json() for launch in launches)


def run_check(plan: CheckPlan, out: Path, log: Callable[[str], None] = print) -> CheckRun:
    out.mkdir(parents=True, exist_ok=True)
    result = CheckRun(plan=plan, out=out)
    arms = {"baseline": plan.arms.baseline, "candidate": plan.arms.candidate}
    runtime: VllmRuntime | None = None
    models: ModelSet | None = None
    if any(a.launch is not None for a in arms.values()):
        runtime = ensure_runtime(log=log)
        if uses_embedded(plan):
            models = ensure_models(runtime)
    port = free_port()
    prompt_sets = [load_prompts(p.source, seed=plan.seed, max_tokens=plan.max_tokens, count=p.count) for p in plan.prompts]
    for rep, arm_name in blocks(plan):
        arm = arms[arm_name]
        log(f"block: repetition {rep}, {arm_name}")
        if arm.launch is not None:
            assert runtime is not None
            spec = server_spec_for(arm, models, arm.launch.port or port)
            server = ManagedServer(spec, runtime.serve_argv, out / "logs" / f"{arm_name}-rep{rep}.log",
                                   runtime_env=runtime.env, startup_timeout_s=arm.launch.startup_timeout_s)
            try:
                server.start()
                server.wait_ready()
            except ServerStartError as exc:
                raise CheckRuntimeError(f"the {arm_name} server would not start:\n{exc}") from exc
            if arm_name not in result.inventory:
                pinned = from_spec(spec, inspect_server(server.base_url), f"launched arm '{arm_name}'")
                result.inventory[arm_name] = ArmInventory(
                    arm=arm_name, kind="launched", model=spec.name, speculative_config=spec.speculative_config,
                    max_model_len=spec.max_model_len, command=redact_argv(server.argv), pinned=pinned)
            try:
                _run_block(plan, result, arm_name, rep, server.base_url, spec.name, server.metrics_url, None,
                           prompt_sets, server)
            finally:
                server.stop()
        else:
            ep = arm.endpoint
            assert ep is not None
            api_key = os.environ.get(ep.api_key_env) if ep.api_key_env else None
            if ep.api_key_env and api_key is None:
                raise CheckRuntimeError(f"{arm_name}: environment variable {ep.api_key_env} is not set")
            if arm_name not in result.inventory:
                pinned = from_server(inspect_server(ep.base_url, api_key), None, None)
                result.inventory[arm_name] = ArmInventory(arm=arm_name, kind="endpoint", model=ep.model, pinned=pinned)
            metrics = ep.metrics_url or f"{server_root(ep.base_url)}/metrics"
            _run_block(plan, result, arm_name, rep, ep.base_url, ep.model, metrics, api_key, prompt_sets, None)
    return result


def _run_block(
    plan: CheckPlan, result: CheckRun, arm: str, rep: int, base_url: str, model: str, metrics_url: str,
    api_key: str | None, prompt_sets: list[PromptSet], server: ManagedServer | None,
) -> None:
    for traffic in plan.traffic:
        for sampling in plan.sampling:
            for i, prompts in enumerate(prompt_sets):
                key = cell_key(traffic.name, sampling.name, i)
                run_dir = result.out / "runs" / arm / f"rep{rep}" / key
                cfg = BenchConfig(
                    base_url=base_url, model=model, api=plan.api, prompts=prompts,
                    load=traffic.load_shape(plan.warmup, plan.seed + rep),
                    sampling=SamplingOverrides(temperature=sampling.temperature, top_p=sampling.top_p,
                                               max_tokens=plan.max_tokens),
                    metrics_url=metrics_url, out_dir=run_dir, api_key=api_key, default_max_tokens=plan.max_tokens,
                )
                summary = run_async(run_bench(cfg))
                oom = [r.error for r in read_jsonl(run_dir / REQUESTS_FILE, RequestRecord)
                       if r.error and any(m.lower() in r.error.lower() for m in OOM_MARKERS)]
                if oom:
                    result.failures.append(Failure(arm=arm, kind="oom", detail=f"{len(oom)} requests: {oom[0][:200]}"))
                if summary.requests and summary.errors == summary.requests and server is None:
                    raise CheckRuntimeError(f"{arm}: every request to {base_url} failed; the endpoint is gone?")
                if server is not None and not server.running():
                    _record_failure(result, arm, server)
                    return


def _record_failure(result: CheckRun, arm: str, server: ManagedServer) -> None:
    tail = log_tail(server.log_path, 60)
    kind: Literal["oom", "crash"] = "oom" if any(m in tail for m in OOM_MARKERS) else "crash"
    if arm == "baseline":
        raise CheckRuntimeError(f"the baseline server died during the measurements:\n{tail}")
    code = server.proc.returncode if server.proc is not None else None
    result.failures.append(Failure(arm=arm, kind=kind, detail=f"exit code {code}; log {server.log_path}"))
