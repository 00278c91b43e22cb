"""The scripted server as a managed subprocess, started and stopped like a vLLM server."""

from __future__ import annotations

import sys
from pathlib import Path

from specguard.scripted.server import ChunkLog, Script
from specguard.vllm.process import ManagedServer
from specguard.vllm.server_spec import ServerSpec


class ScriptedProcess(ManagedServer):
    def __init__(self, script: Script, log_dir: Path) -> None:
        super().__init__(
            ServerSpec(model="scripted", served_model_name="scripted"), [], log_dir / "scripted.log", startup_timeout_s=30
        )
        self.script = script
        self.chunk_log = log_dir / "chunks.jsonl"

    def command(self, port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "specguard.scripted.server",
            "--port",
            str(port),
            "--log",
            str(self.chunk_log),
            "--script",
            self.script.model_dump_json(),
        ]

    def chunk_logs(self) -> dict[str, ChunkLog]:
        if not self.chunk_log.exists():
            return {}
        logs = (ChunkLog.model_validate_json(line) for line in self.chunk_log.read_text().splitlines() if line)
        return {log.request_id: log for log in logs}
