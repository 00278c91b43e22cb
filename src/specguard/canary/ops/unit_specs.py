"""What ``specguard canary units`` writes, decided before anything is written: one finished data object per unit.

Each pool's ``vllm serve`` argv comes from the function every launch uses (``vllm.server_spec.build_argv``),
after ``embedded:`` names became local paths as ``embedded/launch.py`` makes them. Resolving reads what is
installed and never installs: the embedded runtime's and model set's manifests, or the ``vllm`` executable
the units will run (``--vllm-bin``, default ``vllm`` on PATH; systemd needs an absolute path, and
``systemd-analyze verify`` refuses a program that does not exist, so the path must be the one on the hosts).

Choices an operator should know (the runbook repeats them):

* Unit names are the checklist's (``vllm-target-baseline``, ``vllm-target-speculative``, ``vllm-target-control``,
  ``specguard-canary``), not prefixed with the rollout's name, because the rollout's hooks and the checklist's
  runbook call them by these names; hooks naming other units are reported.
* No ``Conflicts=`` between baseline and speculative by default: during a canary both pools serve at once (the
  proxy splits traffic between them), and ``Conflicts=`` would stop one when the other starts. ``exclusive``
  adds it, for a single host that swaps one GPU between the two outside a canary.
* The pinned vLLM version is checked by ``ExecStartPre`` from the installed package metadata under vLLM's own
  interpreter (milliseconds, no import of torch): a host with another vLLM refuses to start the pool rather
  than serving with unpinned code. ``ExecStartPost`` waits for ``/health``, so ``systemctl start`` returns
  when the model is loaded and ``TimeoutStartSec`` (the launch spec's ``startup_timeout_s``) bounds the load.
"""

from __future__ import annotations

import math
import re
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from specguard.canary.spec.rollout import Pool, Rollout, split_listen
from specguard.canary.spec.vocabulary import PoolName
from specguard.embedded.launch import launches_embedded, server_spec_for
from specguard.embedded.models import MANIFEST as MODELS_MANIFEST
from specguard.embedded.models import ModelSet, ModelSetSpec, default_models_dir
from specguard.embedded.runtime import VllmRuntime, default_runtime_dir, load_manifest
from specguard.errors import InputFileError, OptionError, UsageError
from specguard.preflight.discover import DiscoveryError, locate, shebang_interpreter
from specguard.vllm.server_spec import SECRET_FLAGS, LaunchSpec, ServerSpec, build_argv

__all__ = [
    "CONTROLLER_UNIT",
    "POOL_UNITS",
    "ControllerUnit",
    "ModelPin",
    "PoolUnit",
    "SetupMissingError",
    "UnitOptions",
    "UnitSet",
    "plan_units",
]

POOL_UNITS: dict[PoolName, str] = {
    "baseline": "vllm-target-baseline.service",
    "candidate": "vllm-target-speculative.service",
    "control": "vllm-target-control.service",
}
CONTROLLER_UNIT = "specguard-canary.service"
_FIRST_FREE_PORT = 8000
_SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY", re.IGNORECASE)


class SetupMissingError(UsageError):
    """The embedded runtime or model set the rollout names is not installed; the message says how to set it up."""

    code = "setup_missing"


@dataclass(frozen=True)
class UnitOptions:
    """Where things are on the hosts; every ``None`` is found here (on PATH, in the embedded runtime)."""

    vllm_bin: Path | None = None  # the `vllm` executable of non-embedded pools
    vllm_version: str | None = None  # the pinned version; default: what `vllm --version` says
    python: Path | None = None  # vLLM's interpreter, for the version check and readiness wait
    specguard_bin: Path | None = None
    runtime_dir: Path | None = None  # the embedded runtime (default: specguard's cache)
    models_dir: Path | None = None  # the embedded model set (default: specguard's cache)
    working_dir: Path | None = None  # the controller's (relative state paths resolve here); default: cwd
    controller_env_file: Path = Path("/etc/specguard/canary.env")  # holds the admin token variable
    pool_env_file: Path = Path("/etc/specguard/vllm.env")  # optional: HF_TOKEN, VLLM_API_KEY for the pools
    drain_timeout_s: float = 300.0  # the controller's stop timeout: streams finish before SIGKILL
    exclusive: bool = False  # Conflicts= between baseline and speculative (one GPU, no canary)


@dataclass(frozen=True)
class ModelPin:
    role: str  # "target", "draft", "tokenizer"
    name: str
    revision: str | None  # None: not pinned (the hub's default branch when the server starts)


@dataclass(frozen=True)
class PoolUnit:
    pool: PoolName
    unit: str
    rollout_name: str
    launch_from: PoolName  # whose launch spec (a control pool without one replicates the baseline)
    argv: tuple[str, ...]
    env: dict[str, str]
    env_file: str
    host: str
    port: int
    urls: tuple[str, ...]  # where the proxy reaches this pool's servers (the runbook's checks)
    health_url: str  # on the host itself
    vllm_version: str
    version_source: str
    python: str | None  # None: no version check and no readiness wait (say so)
    models: tuple[ModelPin, ...]
    speculative_json: str | None  # exactly the --speculative-config argument
    start_timeout_s: int
    conflicts: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerUnit:
    unit: str
    rollout_name: str
    argv: tuple[str, ...]
    working_dir: str
    env_file: str | None  # the admin token variable's file; None with a token file
    token_env: str | None
    token_file: str | None
    stop_timeout_s: int
    after: tuple[str, ...]


@dataclass(frozen=True)
class UnitSet:
    rollout_name: str
    rollout_path: str
    pools: tuple[PoolUnit, ...]
    controller: ControllerUnit
    state_path: str
    proxy_listen: str
    admin_listen: str
    rollback_hooks: tuple[tuple[str, ...], ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)


def unit_drain_s(options: UnitOptions) -> float:
    """The controller's ``--drain-s``, derived from the unit's ``TimeoutStopSec`` (``drain_timeout_s``): the streams'
    deadline leaves a tenth (at least 10 s) for writing the state and stopping launched pools before systemd's
    SIGKILL. Before issue 28 the unit had TimeoutStopSec=300 and no --drain-s, so 30 s applied."""
    timeout = math.ceil(options.drain_timeout_s)
    return float(max(0, timeout - max(10, math.ceil(timeout / 10))))


def _url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def _embedded(options: UnitOptions) -> tuple[VllmRuntime, ModelSet]:
    runtime_dir = options.runtime_dir or default_runtime_dir()
    runtime = load_manifest(runtime_dir)
    if runtime is None:
        raise SetupMissingError(
            f"the rollout names embedded: models, but the embedded vLLM runtime is not installed at {runtime_dir}: "
            "run 'specguard embedded install' and 'specguard embedded models' first (units are written from what is installed)"
        )
    root = options.models_dir or default_models_dir(ModelSetSpec())
    try:
        models = ModelSet.model_validate_json((root / MODELS_MANIFEST).read_text())
    except (OSError, ValueError):
        models = None
    if models is None or not all((models.path(n) / "config.json").exists() for n in models.spec.models):
        raise SetupMissingError(f"the embedded model set is not made at {root}: run 'specguard embedded models' first")
    return runtime, models


def _revisions(spec: ServerSpec, embedded_set: str | None) -> tuple[ModelPin, ...]:
    def flag(name: str) -> str | None:
        args = spec.extra_args
        for i, arg in enumerate(args):
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return None

    pinned = embedded_set and f"embedded model set {embedded_set}"
    pins = [ModelPin("target", spec.model, pinned or flag("--revision"))]
    if flag("--tokenizer-revision"):
        pins.append(ModelPin("tokenizer", flag("--tokenizer") or spec.model, flag("--tokenizer-revision")))
    cfg = spec.speculative_config or {}
    if isinstance(cfg.get("model"), str):
        revision = cfg.get("revision")
        pins.append(ModelPin("draft", cfg["model"], pinned or (str(revision) if revision else None)))
    return tuple(pins)


def _no_secrets(spec: LaunchSpec, where: str, rollout_path: Path) -> None:
    # Unit files are world-readable (0644) and end up in `systemctl cat`: a key in one is a leaked key.
    for arg in spec.extra_args:
        if arg.split("=", 1)[0].replace("_", "-") in SECRET_FLAGS:
            raise InputFileError(
                f"{rollout_path}: {where}.extra_args: {arg.split('=', 1)[0]} would put a secret into a world-readable unit "
                "file; set VLLM_API_KEY in the pools' environment file instead"
            )
    for name in spec.env:
        if _SECRET_ENV.search(name):
            raise InputFileError(
                f"{rollout_path}: {where}.env.{name} looks like a secret, which a unit file must not hold; "
                "put it into the pools' environment file instead"
            )


def _port(name: PoolName, pool: Pool, launch: LaunchSpec, taken: set[int], rollout_path: Path) -> int:
    url_ports = sorted({_url_port(s.base_url) for s in pool.servers})
    if launch.port is not None:
        if url_ports and url_ports != [launch.port]:
            raise InputFileError(
                f"{rollout_path}: pools.{name}: launch.port is {launch.port} but its servers listen on {url_ports}; "
                "the units would serve where the proxy does not send"
            )
        return launch.port
    if len(url_ports) > 1:
        raise InputFileError(
            f"{rollout_path}: pools.{name}.servers use several ports {url_ports}: one unit serves one port; set launch.port"
        )
    if url_ports:
        return url_ports[0]
    port = _FIRST_FREE_PORT
    while port in taken:
        port += 1
    return port


def _health_url(host: str, port: int) -> str:
    local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{local}]:{port}/health" if ":" in local else f"http://{local}:{port}/health"


def _vllm_bin(options: UnitOptions) -> tuple[Path, str, str, Path | None]:
    """The vllm executable, its pinned version and where that came from, and its interpreter."""
    found = options.vllm_bin or (Path(p) if (p := shutil.which("vllm")) else None)
    if found is None:
        raise OptionError("--vllm-bin: no 'vllm' on PATH; give the absolute path of vllm as installed on the pool hosts")
    exe = found.absolute()
    if not exe.is_file():
        raise OptionError(f"--vllm-bin {exe}: no such file (systemd runs it by this absolute path)")
    python = options.python or shebang_interpreter(exe)
    if options.vllm_version:
        return exe, options.vllm_version, "--vllm-version", python
    try:
        install = locate(vllm=exe)
    except DiscoveryError as exc:
        raise OptionError(f"--vllm-version: {exc}") from exc
    if not install.version:
        raise OptionError(f"--vllm-version: '{exe} --version' did not say its version ({'; '.join(install.workarounds)}); pin it")
    return exe, install.version, install.version_source, python


def _pool_unit(
    name: PoolName,
    rollout: Rollout,
    rollout_path: Path,
    options: UnitOptions,
    taken: set[int],
    warnings: list[str],
) -> PoolUnit:
    pool: Pool | None = getattr(rollout.pools, name)
    assert pool is not None
    launch_from: PoolName = name
    launch = pool.launch
    if launch is None and name == "control":
        launch_from, launch = "baseline", rollout.pools.baseline.launch
    if launch is None:
        raise InputFileError(
            f"{rollout_path}: pools.{launch_from}.launch: 'specguard canary units' writes units from launch specs, and this "
            "pool has none; add the 'launch' spec its servers run"
        )
    _no_secrets(launch, f"pools.{launch_from}.launch", rollout_path)
    port = _port(name, pool, launch, taken, rollout_path)
    embedded = launches_embedded([launch])
    if embedded:
        runtime, models = _embedded(options)
        spec = server_spec_for(launch, models, port)
        # As ManagedServer starts the embedded servers: offline (the models are local), the runtime's env first.
        env = {"HF_HUB_OFFLINE": "1", **runtime.env, **spec.env}
        serve_argv, version, source = runtime.serve_argv, runtime.vllm_version, runtime.version_source
        python: Path | None = options.python or runtime.python
        pins = _revisions(spec, models.root.name)
    else:
        spec = ServerSpec.model_validate({**launch.model_dump(exclude={"startup_timeout_s"}), "port": port})
        exe, version, source, python = _vllm_bin(options)
        serve_argv, env = [str(exe), "serve"], dict(spec.env)
        pins = _revisions(spec, None)
        for pin in pins:
            if pin.revision is None:
                warnings.append(
                    f"pools.{launch_from}.launch: the {pin.role} model {pin.name} has no pinned revision (the checklist asks "
                    "for one): add '--revision <commit>' to extra_args (a draft: 'revision' in speculative_config)"
                )
    if python is None:
        warnings.append(
            f"{POOL_UNITS[name]}: no Python interpreter found for {serve_argv[0]} (pass --python): the unit cannot check "
            f"the pinned vLLM {version} before starting nor wait for /health"
        )
    argv = build_argv(spec, serve_argv, port)
    taken.add(port)
    return PoolUnit(
        pool=name,
        unit=POOL_UNITS[name],
        rollout_name=rollout.name,
        launch_from=launch_from,
        argv=tuple(argv),
        env=env,
        env_file=str(options.pool_env_file),
        host=spec.host,
        port=port,
        urls=tuple(s.base_url for s in pool.servers) or (_health_url(spec.host, port).removesuffix("/health"),),
        health_url=_health_url(spec.host, port),
        vllm_version=version,
        version_source=source,
        python=str(python) if python else None,
        models=pins,
        speculative_json=argv[argv.index("--speculative-config") + 1] if "--speculative-config" in argv else None,
        start_timeout_s=math.ceil(launch.startup_timeout_s),
    )


def _hook_warnings(rollout: Rollout, units: set[str]) -> list[str]:
    out = []
    for kind, commands in (("rollback", rollout.hooks.rollback), ("promote", rollout.hooks.promote)):
        for i, argv in enumerate(commands):
            if Path(argv[0]).name != "systemctl":
                continue
            for arg in argv[2:]:
                unit = arg if "." in arg else f"{arg}.service"
                if not arg.startswith("-") and unit not in units:
                    known = ", ".join(sorted(units))
                    out.append(f"hooks.{kind}[{i}] runs systemctl on {arg}, which these units do not define ({known})")
    return out


def _specguard_bin(options: UnitOptions) -> Path:
    # The specguard that writes the units is the one on PATH or, failing that, the one beside this interpreter
    # (a virtual environment's bin/ that is not on PATH, as `.venv/bin/specguard canary units` runs).
    beside = Path(sys.executable).parent / "specguard"
    found = options.specguard_bin or (Path(p) if (p := shutil.which("specguard")) else beside if beside.is_file() else None)
    if found is None or not found.is_file():
        raise OptionError("--specguard-bin: no 'specguard' on PATH; give the absolute path of specguard on the controller's host")
    return found.absolute()


def plan_units(rollout: Rollout, rollout_path: Path, options: UnitOptions) -> UnitSet:
    """Every unit's data, validated; raises a UsageError (exit 2) before anything is written."""
    rollout_path = rollout_path.absolute()
    warnings: list[str] = []
    taken = {split_listen(rollout.listen)[1], split_listen(rollout.admin.listen)[1]}
    names: list[PoolName] = ["baseline", "candidate"]
    if rollout.pools.control is not None:
        names.append("control")
    pools = [_pool_unit(name, rollout, rollout_path, options, taken, warnings) for name in names]
    if options.exclusive:
        base, cand = POOL_UNITS["baseline"], POOL_UNITS["candidate"]
        pools = [p if p.pool == "control" else replace(p, conflicts=(cand if p.pool == "baseline" else base,)) for p in pools]
    for name, pool in zip(names, pools, strict=True):
        if not getattr(rollout.pools, name).servers:
            warnings.append(
                f"pools.{name} has no 'servers': 'specguard canary run' would launch its own server instead of using "
                f"{pool.unit}; add 'servers: [\"{pool.urls[0]}\"]' to the pool to send to the unit"
            )
    working_dir = (options.working_dir or Path.cwd()).absolute()
    controller = ControllerUnit(
        unit=CONTROLLER_UNIT,
        rollout_name=rollout.name,
        argv=(str(_specguard_bin(options)), "canary", "run", str(rollout_path), "--drain-s", f"{unit_drain_s(options):g}"),
        working_dir=str(working_dir),
        env_file=str(options.controller_env_file) if rollout.admin.token_env else None,
        token_env=rollout.admin.token_env,
        token_file=rollout.admin.token_file,
        stop_timeout_s=math.ceil(options.drain_timeout_s),
        after=tuple(p.unit for p in pools),
    )
    warnings += _hook_warnings(rollout, {p.unit for p in pools} | {CONTROLLER_UNIT})
    return UnitSet(
        rollout_name=rollout.name,
        rollout_path=str(rollout_path),
        pools=tuple(pools),
        controller=controller,
        state_path=str(working_dir / rollout.state.path),
        proxy_listen=rollout.listen,
        admin_listen=rollout.admin.listen,
        rollback_hooks=tuple(tuple(c) for c in rollout.hooks.rollback),
        warnings=tuple(dict.fromkeys(warnings)),  # a control pool replicating the baseline repeats its warnings
    )
