"""A vLLM OpenAI server as a managed subprocess.

Each server runs in a process group of its own, with its output in a log
file. It is ready when ``/health`` answers 200 and ``/v1/models`` lists the
served name. Stopping signals the whole group (the API server and its engine
core), SIGTERM first, SIGKILL after a grace period; servers still running
when specguard exits are stopped by an atexit hook, and each server receives
SIGTERM if specguard itself is killed (PR_SET_PDEATHSIG), so none is orphaned.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from specguard.errors import ServerError
from specguard.lifetime import die_with_parent
from specguard.vllm.server_spec import ServerSpec, build_argv, redact_argv

_LIVE: set[ManagedServer] = set()


class ServerStartError(ServerError):
    """The server exited or did not become ready; the message ends with its log tail."""


# A launched server binds its port 10-60 s after the port was chosen (vLLM loads the model first). A port the
# kernel hands out for bind(host, 0) comes from the ephemeral range, from which every outgoing connection takes its
# local port too, so under a test run's traffic one could take it in between and the server died with "Address
# already in use" (seen once in a full run). Ports below that range are taken only by an explicit bind.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_FIXED_PORTS_FROM = 20000
_HANDED_OUT: set[int] = set()  # two servers launched one after the other must not be given the same unbound port


def _below_ephemeral() -> range | None:
    """The ports between 20000 and the kernel's ephemeral range, or None where that range is unknown or too low."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(_FIXED_PORTS_FROM, low) if low - _FIXED_PORTS_FROM >= 1000 else None


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, below the ephemeral range where there is one (see above), else the kernel's."""
    ports = _below_ephemeral()
    if ports is not None:
        for port in random.sample(ports, 50):
            if port in _HANDED_OUT:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ManagedServer:
    def __init__(
        self,
        spec: ServerSpec,
        serve_argv: list[str],
        log_path: Path,
        runtime_env: dict[str, str] | None = None,
        startup_timeout_s: float = 600.0,
    ) -> None:
        self.spec = spec
        self.serve_argv = serve_argv
        self.log_path = log_path
        self.runtime_env = runtime_env or {}
        self.startup_timeout_s = startup_timeout_s
        self.port = spec.port or 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.argv: list[str] = []

    @property
    def base_url(self) -> str:
        return f"http://{self.spec.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    def command(self, port: int) -> list[str]:
        return build_argv(self.spec, self.serve_argv, port)

    def start(self) -> None:
        """Launch the process. Call from the main thread: PR_SET_PDEATHSIG fires when the launching thread exits."""
        if self.proc is not None:
            raise RuntimeError("server already started")
        self.port = self.spec.port or free_port(self.spec.host)
        self.argv = self.command(self.port)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", **self.runtime_env, **self.spec.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(("$ " + " ".join(redact_argv(self.argv)) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        _LIVE.add(self)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise ServerStartError(
                    f"vLLM server for {self.spec.name} exited with code {code} before it was ready.\n"
                    f"log {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if self.is_ready():
                return
            time.sleep(0.5)
        self.stop()
        raise ServerStartError(
            f"vLLM server for {self.spec.name} was not ready within {self.startup_timeout_s:g} s.\n"
            f"log {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                if resp.status != 200:
                    return False
            with urllib.request.urlopen(f"{self.base_url}/v1/models", timeout=2) as resp:
                ids = [m.get("id") for m in json.load(resp).get("data", [])]
            return self.spec.name in ids
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group now (fault injection, or the last resort of stop)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.kill(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # The engine core may outlive the API server; take the group down either way.
        self.kill(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _LIVE.discard(self)

    def __enter__(self) -> ManagedServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(grace_s=5.0)
