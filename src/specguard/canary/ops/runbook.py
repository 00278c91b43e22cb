"""RUNBOOK.md: the exact commands to watch, pause, roll back and verify one rollout, written beside its units.

Pure: a ``UnitSet`` in, Markdown out. A runbook is read under pressure, so every command is complete (absolute
paths, unit names, URLs) and can be pasted as it is; shell words are quoted with ``shlex.join``. The manual
rollback is the checklist's (stop the speculative unit, start the baseline, look at its status).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from specguard.canary.ops.unit_specs import POOL_UNITS, UnitSet
from specguard.canary.spec.vocabulary import RUNBOOK_SECTIONS

__all__ = ["RUNBOOK", "render_runbook"]

RUNBOOK = "RUNBOOK.md"


def _code(*commands: list[str] | str) -> list[str]:
    return ["```sh", *(c if isinstance(c, str) else shlex.join(c) for c in commands), "```", ""]


def render_runbook(units: UnitSet, out_dir: Path) -> str:
    """The runbook of ``units`` as written into ``out_dir``."""
    specguard = units.controller.argv[0]
    state = units.state_path
    rollout = units.rollout_path
    spec_unit, base_unit = POOL_UNITS["candidate"], POOL_UNITS["baseline"]
    base = next(p for p in units.pools if p.pool == "baseline")
    lines = [
        f"# Rollback runbook: canary `{units.rollout_name}`",
        "",
        f"Written by `specguard canary units` from `{rollout}`. Proxy on `{units.proxy_listen}`, admin API on "
        f"`{units.admin_listen}`, state file `{state}`.",
        "",
        "| unit | pool | serves | vLLM | speculative config |",
        "|---|---|---|---|---|",
    ]
    for p in units.pools:
        spec = f"`{p.speculative_json}`" if p.speculative_json else "none"
        lines.append(f"| `{p.unit}` | {p.pool} | `{p.host}:{p.port}` | {p.vllm_version} | {spec} |")
    lines += [f"| `{units.controller.unit}` | controller | `{units.proxy_listen}` | | |", ""]
    lines += ["## Install", ""]
    lines += ["On each pool host, the unit of its pool; on the controller's host, the controller:", ""]
    install = [f"sudo install -m 0644 {shlex.quote(str(out_dir / p.unit))} /etc/systemd/system/" for p in units.pools]
    lines += _code(*install, f"sudo install -m 0644 {shlex.quote(str(out_dir / units.controller.unit))} /etc/systemd/system/")
    if units.controller.env_file and units.controller.token_env:
        env_file, token_env = units.controller.env_file, units.controller.token_env
        lines += [f"The admin token: `{token_env}=...` in `{env_file}`, readable by root only:", ""]
        lines += _code(
            f"sudo install -m 0600 /dev/null {shlex.quote(units.controller.env_file)}",
            f"echo \"{units.controller.token_env}=$(python3 -c 'import secrets; print(secrets.token_hex(16))')\" "
            f"| sudo tee {shlex.quote(units.controller.env_file)} >/dev/null",
        )
    lines += [f"Secrets for the pools (`HF_TOKEN`, `VLLM_API_KEY`) go into `{base.env_file}` (mode 0600), never into a unit.", ""]
    lines += _code(
        "sudo systemctl daemon-reload",
        *(["sudo", "systemctl", "enable", "--now", p.unit] for p in units.pools),
        ["sudo", "systemctl", "enable", "--now", units.controller.unit],
    )
    lines += [
        "`systemctl start` of a pool returns once its `/health` answers (the model is loaded); a pool whose host has "
        "another vLLM version than the unit pins does not start (see `journalctl`).",
        "",
        f"## {RUNBOOK_SECTIONS['status']}",
        "",
    ]
    lines += _code(
        [specguard, "canary", "status", "--state", state, "--json"],
        ["systemctl", "status", units.controller.unit, "--no-pager"],
        *(["systemctl", "status", p.unit, "--no-pager"] for p in units.pools),
        ["journalctl", "-u", units.controller.unit, "--since", "-1h", "--no-pager"],
    )
    lines += [f"## {RUNBOOK_SECTIONS['rollback']}", ""]
    lines += [
        "Pausing holds the candidate's share where it is; rolling back sends no new request to the candidate, lets "
        "streams finish, and runs the rollout's rollback hooks:",
        "",
    ]
    lines += _code(
        [specguard, "canary", "pause", rollout],
        [specguard, "canary", "resume", rollout],
        [specguard, "canary", "rollback", rollout],
    )
    if units.rollback_hooks:
        lines += ["The rollback hooks, in order:", ""]
        lines += _code(*(list(h) for h in units.rollback_hooks))
    else:
        lines += ["The rollout has no rollback hooks: a rollback moves traffic only and the speculative unit keeps running.", ""]
    lines += [
        f"## {RUNBOOK_SECTIONS['manual']}",
        "",
        "Return to target-model-only serving, as the checklist does: stop the speculative pool, start the baseline, "
        "check it. A controller that still runs sees the candidate's servers fail and sends everything to the baseline "
        "(a request that fails before its first byte is retried there); streams in flight on the candidate are cut.",
        "",
    ]
    lines += _code(
        ["sudo", "systemctl", "stop", spec_unit],
        ["sudo", "systemctl", "start", base_unit],
        ["sudo", "systemctl", "status", base_unit, "--no-pager"],
    )
    lines += [
        f"## {RUNBOOK_SECTIONS['verify']}",
        "",
        "Each server lists its model and serves metrics; the baseline has no `spec_decode` metrics, the candidate does:",
        "",
    ]
    for p in units.pools:
        for url in p.urls:
            lines += _code(
                ["curl", "-fsS", f"{url.rstrip('/')}/v1/models"],
                f"curl -fsS {shlex.quote(url.rstrip('/') + '/metrics')} | grep -E "
                "'^vllm:(num_requests_waiting|kv_cache_usage_perc|gpu_cache_usage_perc|spec_decode_num_accepted_tokens_total)'",
            )
    lines += [
        f"## {RUNBOOK_SECTIONS['events']}",
        "",
        f"Every window, decision, critical condition, manual action and hook run is in the `events` table of `{state}` "
        "and in the JSONL event log beside it; the controller's output is in the journal "
        f"(`journalctl -u {units.controller.unit}`).",
        "",
        "## Choices in these units",
        "",
        "- No `Conflicts=` between baseline and speculative: both serve at once during a canary."
        if not any(p.conflicts for p in units.pools)
        else "- `Conflicts=` between baseline and speculative: starting one stops the other (one GPU, no canary).",
        "- `ExecStartPre` checks the pinned vLLM version from the package metadata; `ExecStartPost` waits for `/health`.",
        "- `KillMode=mixed`: SIGTERM to the main process (vLLM, or the controller, which drains streams), SIGKILL to "
        "the rest at `TimeoutStopSec`.",
    ]
    if units.warnings:
        lines += ["", "## Warnings when these units were written", "", *(f"- {w}" for w in units.warnings)]
    return "\n".join(lines) + "\n"
