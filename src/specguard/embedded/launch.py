"""A check plan's launched arms on the embedded runtime: ``embedded:NAME`` resolved to the local model set.

This happens before the plan's arms reach the generic check runner (``check/runner.py``), which only
starts the specs it is given. A plan keeps its ``embedded:`` names as written (its record and hash do not
depend on where the models are stored).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable

from specguard.check.launch import Launcher
from specguard.check.plan import CheckPlan, LaunchSpec
from specguard.embedded.cpus import assign_cores
from specguard.embedded.models import ModelSet, ensure_models
from specguard.embedded.runtime import ensure_runtime
from specguard.embedded.servers import EMBEDDED_SERVER_ENV, SERVED_NAME
from specguard.vllm.server_spec import ServerSpec

EMBEDDED_PREFIX = "embedded:"


def server_spec_for(launch: LaunchSpec, models: ModelSet | None, port: int | None) -> ServerSpec:
    """A launch spec (a check plan's arm, a canary's pool) as a server spec, ``embedded:`` names made paths into ``models``."""
    spec = launch.model_dump(exclude={"startup_timeout_s"})
    spec["port"] = port
    if spec["model"].startswith(EMBEDDED_PREFIX):
        assert models is not None
        spec["model"] = str(models.path(spec["model"].split(":", 1)[1]))
        spec["served_model_name"] = spec["served_model_name"] or SERVED_NAME
        spec["env"] = {**EMBEDDED_SERVER_ENV, **spec["env"]}
    cfg = spec.get("speculative_config")
    if cfg and isinstance(cfg.get("model"), str) and cfg["model"].startswith(EMBEDDED_PREFIX):
        assert models is not None
        spec["speculative_config"] = {**cfg, "model": str(models.path(cfg["model"].split(":", 1)[1]))}
    return ServerSpec.model_validate(spec)


def uses_embedded(plan: CheckPlan) -> bool:
    return launches_embedded([a.launch for a in (plan.arms.baseline, plan.arms.candidate)])


def launches_embedded(launches: Iterable[LaunchSpec | None]) -> bool:
    """Whether any of these launch specs names an ``embedded:`` model (then the model set must be installed)."""
    return any(EMBEDDED_PREFIX in launch.model_dump_json() for launch in launches if launch is not None)


def embedded_launcher(plan: CheckPlan, log: Callable[[str], None]) -> Launcher:
    """The embedded runtime (installed if missing), the model set if the plan names it, every launched arm's spec."""
    runtime = ensure_runtime(log=log)
    models = ensure_models(runtime) if uses_embedded(plan) else None
    arms = {"baseline": plan.arms.baseline, "candidate": plan.arms.candidate}
    specs = {name: server_spec_for(arm.launch, models, None) for name, arm in arms.items() if arm.launch is not None}
    if not uses_embedded(plan):
        return Launcher(serve_argv=runtime.serve_argv, env=runtime.env, specs=specs)
    # The embedded default: the CPU server and the client on cores of their own (embedded/cpus.py).
    cores = assign_cores(os.sched_getaffinity(0))
    log(f"cores: {cores.note}")
    specs = {name: s.model_copy(update={"env": {**cores.server_env(), **s.env}}) for name, s in specs.items()}
    argv = [*cores.server_prefix(shutil.which("taskset")), *runtime.serve_argv]
    return Launcher(serve_argv=argv, env=runtime.env, specs=specs, client_cpus=cores.client)
