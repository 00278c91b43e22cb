"""The vLLM launcher: readiness failures carry the log tail (that no server outlives specguard: test_signals_vllm)."""

from __future__ import annotations

import os

import pytest

from specguard.embedded.servers import embedded_server, embedded_spec
from specguard.vllm.process import ManagedServer, ServerStartError

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
