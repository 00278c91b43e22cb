"""What a hook gets (issue 28): an explicit environment, never a token variable; its output redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.canary.control.hook_env import REDACTED, hook_environment, redact, token_values
from specguard.canary.spec.rollout import load_rollout
from specguard.errors import InputFileError
from tests.canary_harness import MINIMAL_ROLLOUT

PROMETHEUS = "metrics: {source: prometheus, url: 'http://prom:9090', token_env: PROM_TOKEN}\n"


def _rollout(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "rollout.yaml"
    path.write_text(MINIMAL_ROLLOUT + PROMETHEUS + extra)
    return path


def test_a_hook_gets_the_base_variables_the_decision_and_what_hooks_env_lists_and_no_token(tmp_path: Path) -> None:
    rollout = load_rollout(_rollout(tmp_path, "hooks: {rollback: [['true']], env: [KUBECONFIG]}\n"))
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "KUBECONFIG": "/etc/kube.conf",
        "PROM_TOKEN": "prometheus-secret-value",
        "CANARY_TOKEN": "admin-secret-value-123",
        "AWS_SECRET_ACCESS_KEY": "not listed",
    }
    env = hook_environment(rollout, {"hook": "rollback", "percent": "25"}, environ)
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "KUBECONFIG": "/etc/kube.conf",
        "SPECGUARD_HOOK": "rollback",
        "SPECGUARD_PERCENT": "25",
    }
    secrets = token_values(rollout, environ)
    assert sorted(secrets) == ["admin-secret-value-123", "prometheus-secret-value"]
    printed = "token=prometheus-secret-value; admin admin-secret-value-123"
    assert redact(printed, secrets) == f"token={REDACTED}; admin {REDACTED}"


def test_hooks_env_naming_a_token_variable_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="PROM_TOKEN holds a token"):
        load_rollout(_rollout(tmp_path, "hooks: {env: [PROM_TOKEN]}\n"))
    with pytest.raises(InputFileError, match="not an environment variable name"):
        load_rollout(_rollout(tmp_path, "hooks: {env: ['A B']}\n"))
