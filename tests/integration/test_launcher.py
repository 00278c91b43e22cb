"""The vLLM launcher: readiness failures carry the log tail, and no server outlives specguard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specguard.embedded.servers import embedded_server, embedded_spec
from specguard.vllm.process import ManagedServer, ServerStartError
from tests.helpers import sigint_default

pytestmark = pytest.mark.vllm


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_server_that_exits_reports_its_log_tail(runtime, models, tmp_path):
    spec = embedded_spec(models, "baseline").model_copy(update={"extra_args": ["--max-num-seqs", "not-a-number"]})
    server = embedded_server(runtime, spec, "bad", tmp_path)
    with pytest.raises(ServerStartError) as e:
        with server:
            pass
    msg = str(e.value)
    assert "exited with code" in msg and str(server.log_path) in msg
    assert "max-num-seqs" in msg  # argparse's complaint, from the log tail
    assert not group_alive(server.proc.pid)


def test_server_not_ready_in_time_is_stopped_with_its_log_tail(runtime, models, tmp_path):
    server = ManagedServer(
        embedded_spec(models, "baseline"), runtime.serve_argv, tmp_path / "slow.log", runtime_env=runtime.env, startup_timeout_s=3
    )
    with pytest.raises(ServerStartError) as e:
        with server:
            pass
    assert "was not ready within 3 s" in str(e.value)
    assert "api_server" in str(e.value)  # the command line heads the log
    assert not group_alive(server.proc.pid)


def _serve(tmp_path: Path, name: str) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / f"{name}.out"
    fh = log.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", "embedded", "serve", "--method", "baseline"],
        stdout=fh,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_default,
    )
    return proc, log


def _server_pgid(cli_pid: int) -> int:
    children = Path(f"/proc/{cli_pid}/task/{cli_pid}/children").read_text().split()
    assert children, "the CLI has no child server"
    return os.getpgid(int(children[0]))


def test_no_orphans_after_ctrl_c_or_kill_of_specguard(runtime, models, tmp_path):
    """Ctrl-C stops the server cleanly; SIGKILL of specguard still takes the server down (PR_SET_PDEATHSIG)."""
    a, a_log = _serve(tmp_path, "a")
    b, b_log = _serve(tmp_path, "b")
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not ("ready:" in a_log.read_text() and "ready:" in b_log.read_text()):
            assert a.poll() is None and b.poll() is None, a_log.read_text() + b_log.read_text()
            time.sleep(1)
        assert "ready:" in a_log.read_text() and "ready:" in b_log.read_text()
        pg_a, pg_b = _server_pgid(a.pid), _server_pgid(b.pid)
        assert group_alive(pg_a) and group_alive(pg_b)
        a.send_signal(signal.SIGINT)
        b.kill()
        a.wait(timeout=60)
        b.wait(timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (group_alive(pg_a) or group_alive(pg_b)):
            time.sleep(0.5)
        assert not group_alive(pg_a), "server left running after Ctrl-C"
        assert not group_alive(pg_b), "server left running after specguard was killed"
        assert a.returncode == 130 and "interrupted" in a_log.read_text(), "Ctrl-C: the table's exit code, no traceback"
        assert "Traceback" not in a_log.read_text()
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
