"""A typed description of a ``vllm serve`` invocation, turned into a command line.

The same spec launches the embedded CPU vLLM and a real GPU deployment; only
the runtime (interpreter, entry point, environment) differs.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from specguard.models_base import StrictModel


class ServerSpec(StrictModel):
    model: str = Field(description="model directory or name")
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, description="None: pick a free port at launch")
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    dtype: str | None = None
    gpu_memory_utilization: float | None = None
    speculative_config: dict[str, Any] | None = None
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.served_model_name or self.model


class LaunchSpec(ServerSpec):
    """A vLLM server specguard starts itself (a check plan's launched arm, a canary's pool).

    ``model: embedded:target`` uses the embedded model set; ``sim:NAME`` specguard's simulated server.
    """

    startup_timeout_s: float = 900.0


def build_argv(spec: ServerSpec, serve_argv: list[str], port: int) -> list[str]:
    """Full argv: ``serve_argv`` is ``[vllm, serve]`` or ``[python, -m, vllm.entrypoints.openai.api_server]``."""
    argv = list(serve_argv)
    if len(argv) >= 2 and argv[-1] == "serve":
        argv.append(spec.model)
    else:
        argv += ["--model", spec.model]
    argv += ["--host", spec.host, "--port", str(port)]
    if spec.served_model_name:
        argv += ["--served-model-name", spec.served_model_name]
    if spec.max_model_len is not None:
        argv += ["--max-model-len", str(spec.max_model_len)]
    if spec.tensor_parallel_size != 1:
        argv += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
    if spec.dtype:
        argv += ["--dtype", spec.dtype]
    if spec.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(spec.gpu_memory_utilization)]
    if spec.speculative_config is not None:
        argv += ["--speculative-config", json.dumps(spec.speculative_config, separators=(",", ":"))]
    return argv + list(spec.extra_args)


SECRET_FLAGS = ("--api-key",)
REDACTED = "<redacted>"


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the values of secret-bearing flags replaced, for logs and reports (never for running)."""
    out: list[str] = []
    hide_next = False
    for tok in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = tok.partition("=")
        if flag.replace("_", "-") in SECRET_FLAGS:
            out.append(f"{flag}={REDACTED}" if eq else tok)
            hide_next = not eq
            continue
        out.append(tok)
    return out
