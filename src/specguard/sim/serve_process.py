"""The simulated server as a managed subprocess, started and stopped like a vLLM server (and dying with its parent)."""

from __future__ import annotations

import sys
from pathlib import Path

from specguard.sim.run import SimRequest
from specguard.vllm.process import ManagedServer
from specguard.vllm.server_spec import ServerSpec


class SimServeProcess(ManagedServer):
    def __init__(
        self,
        req: SimRequest,
        log_dir: Path,
        served_name: str = "sim",
        time_scale: float = 1.0,
        *,
        log_name: str = "sim-serve.log",
        port: int | None = None,
        startup_timeout_s: float = 60,
    ) -> None:
        super().__init__(
            ServerSpec(model=served_name, served_model_name=served_name, port=port),
            [],
            log_dir / log_name,
            startup_timeout_s=startup_timeout_s,
        )
        self.req = req
        self.served_name = served_name
        self.time_scale = time_scale

    def command(self, port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "specguard.sim.serve",
            "--json",
            self.req.model_dump_json(),
            "--host",
            self.spec.host,
            "--port",
            str(port),
            "--served-model-name",
            self.served_name,
            "--time-scale",
            repr(self.time_scale),
        ]
