"""A check plan's launched arms on the embedded runtime (installed if missing) and its model set.

``embedded/launch.py`` resolves ``embedded:`` names; this builds the ``Launcher`` the check runner asks for,
with the server and the client on cores of their own, and reads one arm as a server command line for
``specguard inventory --plan``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from specguard.check.launch import Launcher
from specguard.check.plan import CheckPlan, load_plan
from specguard.embedded.cpus import assign_cores
from specguard.embedded.launch import launches_embedded, server_spec_for
from specguard.embedded.models import ensure_models
from specguard.embedded.runtime import ensure_runtime
from specguard.errors import OptionError
from specguard.inventory.collect import spec_args
from specguard.inventory.request import ArmName

__all__ = ["embedded_launcher", "plan_arm", "uses_embedded"]


def uses_embedded(plan: CheckPlan) -> bool:
    return launches_embedded([a.launch for a in (plan.arms.baseline, plan.arms.candidate)])


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


def plan_arm(plan_path: Path, arm: ArmName | None) -> tuple[list[str] | None, str | None]:
    """A check plan's arm as server arguments (a launched arm) or its URL (an endpoint arm)."""
    if arm is None:
        raise OptionError("--plan needs --arm baseline or --arm candidate")
    plan = load_plan(plan_path)
    chosen = getattr(plan.arms, arm)
    if chosen.endpoint is not None:
        return None, chosen.endpoint.base_url
    assert chosen.launch is not None  # an arm is an endpoint or a launch (the plan model says so)
    models = ensure_models(ensure_runtime()) if uses_embedded(plan) else None
    return spec_args(server_spec_for(chosen.launch, models, 0)), None
