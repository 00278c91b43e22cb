"""The real HAProxy in a test: started by the test as a child process with a configuration written by
``render_haproxy_config`` (a free port, a socket in the test's directory), stopped with its process group.

It runs in the foreground (``-db``: one process, no daemon, no fork), so the process the test started is
HAProxy itself; ``ManagedServer`` gives it PR_SET_PDEATHSIG and stops its group, so it never outlives the test.
It is ready when the runtime API answers and every server of the backend passes its health checks.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from specguard.canary.ops.haproxy_config import render_haproxy_config
from specguard.canary.routers.haproxy import ServerState, parse_servers_state
from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.rollout import Rollout
from specguard.vllm.process import ManagedServer
from specguard.vllm.server_spec import ServerSpec

# Debian puts it in /usr/sbin, which is not on every user's PATH; .ci/run installs the package.
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin") or "/usr/sbin/haproxy"


def engine_of(rollout: Rollout) -> HAProxyEngine:
    assert isinstance(rollout.engine, HAProxyEngine)
    return rollout.engine


def servers_state_blocking(socket_path: str, backend: str, timeout_s: float = 2.0) -> list[ServerState]:
    """``show servers state BACKEND`` over a plain socket, for the synchronous readiness check."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(socket_path)
        s.sendall(f"show servers state {backend}\n".encode())
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return parse_servers_state(b"".join(chunks).decode())


class HAProxyProcess(ManagedServer):
    def __init__(self, rollout: Rollout, log_dir: Path) -> None:
        super().__init__(
            ServerSpec(model="haproxy", served_model_name="haproxy"), [], log_dir / "haproxy.log", startup_timeout_s=30
        )
        self.rollout = rollout
        self.engine = engine_of(rollout)
        self.config = log_dir / "haproxy.cfg"

    def command(self, port: int) -> list[str]:
        self.config.parent.mkdir(parents=True, exist_ok=True)
        # A short server timeout would not change these tests; the generator's default is what is tested.
        self.config.write_text(render_haproxy_config(self.rollout, bind=f"127.0.0.1:{port}"))
        return [HAPROXY, "-db", "-f", str(self.config)]

    def is_ready(self) -> bool:
        try:
            states = servers_state_blocking(self.engine.socket, self.engine.backend)
        except (OSError, ValueError):
            return False
        return bool(states) and all(s.up for s in states)
