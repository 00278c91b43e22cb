"""The HAProxy engine's generated haproxy.cfg, checked by the real ``haproxy -c -f`` (the Debian package, as
.ci/run installs).

The system tier (it runs the haproxy binary); the configuration's content is checked without it in
tests/unit/canary/test_haproxy.py, whose rollout builders these tests share.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specguard.canary.ops.haproxy_config import render_haproxy_config
from specguard.cli.app import app
from specguard.errors import ExitCode
from tests.haproxy_harness import HAPROXY
from tests.unit.canary.test_haproxy import ROLLOUT_YAML, rollout


def haproxy_check(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    return subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    "variant",
    [{}, {"control": True}, {"sticky_header": "X-User-Id"}, {"control": True, "sticky_header": "x-tenant"}],
    ids=["roundrobin", "control", "sticky", "control-sticky"],
)
def test_the_generated_config_is_valid_for_the_real_haproxy(variant: dict[str, Any], tmp_path: Path) -> None:
    text = render_haproxy_config(rollout(**variant), bind="127.0.0.1:18080")
    check = haproxy_check(text, tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "stats socket /run/haproxy/admin.sock mode 600 level admin" in text.splitlines()[7]


def test_tls_servers_are_verified_and_the_config_is_valid(tmp_path: Path) -> None:
    r = rollout()
    r.pools.candidate.servers[0].base_url = "https://127.0.0.1:8443"
    text = render_haproxy_config(r)
    assert "server speculative-1 127.0.0.1:8443 weight 0 ssl verify required ca-file @system-ca" in text
    check = haproxy_check(text, tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_command_writes_a_valid_config_and_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "rollout.yaml"
    path.write_text(ROLLOUT_YAML.format(socket=tmp_path / "admin.sock"))
    out = tmp_path / "etc" / "haproxy.cfg"
    runner = CliRunner()
    args = ["canary", "haproxy-config", str(path), "--out", str(out), "--bind", "127.0.0.1:18081"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert f"stats socket {tmp_path / 'admin.sock'} mode 600 level admin" in out.read_text()
    assert haproxy_check(out.read_text(), tmp_path).returncode == 0
    out.write_text("# the operator's own\n")
    again = runner.invoke(app, args)
    assert again.exit_code == ExitCode.USAGE and "--force" in again.output
    assert out.read_text() == "# the operator's own\n"
    forced = runner.invoke(app, [*args, "--force"])
    assert forced.exit_code == 0 and "balance hdr(x-user-id)" in out.read_text()
