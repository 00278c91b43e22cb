"""A check plan's ``sim:`` arms on specguard's simulated server: each launched arm a ``sim serve`` process.

An arm is written as a launch spec whose model is ``sim:CATALOG-NAME``; its ``tensor_parallel_size``,
``max_model_len``, ``gpu_memory_utilization`` and ``speculative_config`` (``method``, ``model`` as the draft's
catalog name, ``num_speculative_tokens``) mean what they mean to vLLM, and ``extra_args`` are ``sim serve``'s own
flags (``--gpu`` is required; ``--acceptance``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--seed``,
``--time-scale``). The runner gets specs without those flags (they are not vLLM's, and the inventory reads a
spec as a vLLM command line) and a ``server`` factory that starts ``SimServeProcess`` instead of vLLM.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specguard.check.launch import Launcher
from specguard.check.plan import CheckPlan, CheckPlanError
from specguard.errors import OptionError
from specguard.sim.run import SimRequest, build_arms
from specguard.sim.serve_cli import serve_request
from specguard.sim.serve_process import SimServeProcess
from specguard.sizing.catalog import CatalogError
from specguard.validation import finite
from specguard.vllm.process import ManagedServer
from specguard.vllm.server_spec import LaunchSpec, ServerSpec

SIM_PREFIX = "sim:"
SIM_FLAGS = ("--gpu", "--acceptance", "--max-num-seqs", "--max-num-batched-tokens", "--seed", "--time-scale")


def _flags(extra_args: list[str]) -> dict[str, str]:
    """``sim serve`` flags as ``--flag value`` pairs (or ``--flag=value``), only those a plan may set."""
    out: dict[str, str] = {}
    it = iter(extra_args)
    for tok in it:
        flag, eq, value = tok.partition("=")
        if flag not in SIM_FLAGS:
            raise OptionError(f"extra_args: {flag} is not a 'sim serve' flag a plan sets (one of {', '.join(SIM_FLAGS)})")
        if not eq:
            value = next(it, "")
            if not value:
                raise OptionError(f"extra_args: {flag} needs a value")
        out[flag] = value
    return out


def _int(flags: dict[str, str], flag: str) -> int | None:
    if flag not in flags:
        return None
    try:
        return int(flags[flag])
    except ValueError:
        raise OptionError(f"extra_args: {flag} {flags[flag]}: expected an integer") from None


def sim_request(launch: LaunchSpec) -> tuple[SimRequest, float]:
    """The simulated server a ``sim:`` launch spec describes, and its time scale; OptionError naming the flag if not."""
    flags = _flags(launch.extra_args)
    if "--gpu" not in flags:
        raise OptionError("extra_args: a sim: arm needs --gpu NAME (h100-80gb, a100-80gb, ...)")
    cfg = launch.speculative_config or {}
    k = cfg.get("num_speculative_tokens")
    req = serve_request(
        launch.model.removeprefix(SIM_PREFIX),
        flags["--gpu"],
        launch.tensor_parallel_size,
        cfg.get("method"),
        cfg.get("model"),
        int(k) if k is not None else None,
        flags.get("--acceptance"),
        _int(flags, "--max-num-seqs"),
        _int(flags, "--max-num-batched-tokens"),
        _int(flags, "--seed"),
    )
    update: dict[str, object] = {"max_model_len": launch.max_model_len}
    if launch.gpu_memory_utilization is not None:
        update["gpu_memory_utilization"] = launch.gpu_memory_utilization
    try:
        scale = float(flags.get("--time-scale", "1"))
    except ValueError:
        raise OptionError(f"extra_args: --time-scale {flags['--time-scale']}: expected a number") from None
    finite(scale, "--time-scale", positive=True)
    return SimRequest.model_validate({**req.model_dump(), **update}), scale


def uses_sim(plan: CheckPlan) -> bool:
    return any(a.launch is not None and a.launch.model.startswith(SIM_PREFIX) for a in (plan.arms.baseline, plan.arms.candidate))


def sim_launcher(plan: CheckPlan, log: Callable[[str], None]) -> Launcher:
    """Every launched arm as a simulated server; an arm that is not ``sim:`` is refused (this launcher runs no vLLM)."""
    arms = {"baseline": plan.arms.baseline, "candidate": plan.arms.candidate}
    requests: dict[str, tuple[SimRequest, float]] = {}
    specs: dict[str, ServerSpec] = {}
    for name, arm in arms.items():
        if arm.launch is None:
            continue
        if not arm.launch.model.startswith(SIM_PREFIX):
            raise CheckPlanError(f"arms.{name}.launch.model: {arm.launch.model}: the simulated launcher runs only sim: models")
        try:
            requests[name] = sim_request(arm.launch)
            build_arms(requests[name][0])  # the catalogs' names and the fit checked here, not in a server's log
        except (OptionError, CatalogError) as exc:
            raise CheckPlanError(f"arms.{name}.launch: {exc}") from exc
        served = arm.launch.served_model_name or arm.launch.model.removeprefix(SIM_PREFIX)
        spec = arm.launch.model_dump(exclude={"startup_timeout_s", "extra_args"})
        specs[name] = ServerSpec.model_validate({**spec, "served_model_name": served})
    log("launching specguard's SIMULATED server for " + ", ".join(requests) + ": no vLLM, no GPU; nothing it reports is measured")

    def server(arm: str, spec: ServerSpec, log_path: Path, timeout_s: float) -> ManagedServer:
        req, scale = requests[arm]
        return SimServeProcess(
            req, log_path.parent, spec.name, scale, log_name=log_path.name, port=spec.port, startup_timeout_s=timeout_s
        )

    return Launcher(serve_argv=[], env={}, specs=specs, server=server)
