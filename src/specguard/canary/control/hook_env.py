"""What a hook sees: an explicit environment, never a token; and its output with every token's value redacted. Pure.

Before issue 28 a hook got the controller's environment minus the admin and Grafana token variables, so the
Prometheus token (``metrics.token_env``) reached a hook, which printed it, and it was written into
``state.sqlite``, the JSONL mirror and ``canary events --json``. Now a hook gets only:

* ``PATH``, ``HOME``, ``LANG``, ``LC_ALL``, ``TZ`` from the controller (what programs need to run at all);
* the decision it runs for: ``SPECGUARD_HOOK`` (rollback, promote), ``SPECGUARD_ROLLOUT`` (the rollout's
  name), ``SPECGUARD_STEP``, ``SPECGUARD_PERCENT`` (the candidate's weight when the decision was taken),
  ``SPECGUARD_REASON`` (the decision's first reason, in words), ``SPECGUARD_STATE`` (the state file);
* the variables the rollout file lists under ``hooks.env`` (names, not values), refused at load when one of
  them is a token variable the rollout names.

And whatever a hook prints is scanned for the value of every token the rollout names (admin, Grafana,
Prometheus; from their variables or files) before it is logged or stored: a token a hook found elsewhere
still never reaches the event log.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from specguard.canary.spec.rollout import Rollout

__all__ = ["BASE_VARIABLES", "REDACTED", "hook_environment", "redact", "token_values", "token_variables"]

BASE_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
REDACTED = "[redacted]"
# A token shorter than this is not searched for in output: redacting every "1" a hook prints would hide its
# output and protect nothing (the admin API refuses short tokens off loopback anyway).
_MIN_SECRET_LEN = 8


def token_variables(rollout: Rollout) -> set[str]:
    """The names of every environment variable the rollout reads a token from."""
    names = {rollout.admin.token_env, getattr(rollout.metrics, "token_env", None)}
    if rollout.grafana is not None:
        names.add(rollout.grafana.token_env)
    return {n for n in names if n}


def token_values(rollout: Rollout, environ: Mapping[str, str]) -> list[str]:
    """The values of those tokens (and of the admin token file), longest first, for ``redact``."""
    values = [environ.get(name, "").strip() for name in token_variables(rollout)]
    if rollout.admin.token_file is not None:
        try:
            values.append(Path(rollout.admin.token_file).read_text(encoding="utf-8").strip())
        except OSError:
            pass  # read_token refused an unreadable file before anything started
    return sorted({v for v in values if len(v) >= _MIN_SECRET_LEN}, key=len, reverse=True)


def hook_environment(rollout: Rollout, decision: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a hook: the base variables, the decision's ``SPECGUARD_*`` and ``hooks.env``."""
    source = os.environ if environ is None else environ
    secret = token_variables(rollout)
    wanted = [*BASE_VARIABLES, *rollout.hooks.env]
    env = {name: source[name] for name in wanted if name in source and name not in secret}
    env.update({f"SPECGUARD_{key.upper()}": value for key, value in decision.items()})
    return env


def redact(text: str, secrets: list[str]) -> str:
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text
