"""What the check runner needs to start a plan's launched arms, and nothing of where it comes from.

A ``Launcher`` is a vLLM runtime's serve command and environment plus each launched arm's server spec with
every model name already resolved. The runner asks a ``LaunchResolver`` for one only when a launched block is
about to run (a resumed check whose launched blocks are done installs nothing); ``launchers/embedded.py``
provides the resolver that knows the embedded runtime and ``embedded:`` model names, ``launchers/simulated.py`` the one
that starts specguard's simulated server instead of vLLM (its ``server`` factory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specguard.check.plan import CheckPlan
from specguard.vllm.process import ManagedServer
from specguard.vllm.server_spec import ServerSpec

ServerFactory = Callable[[str, ServerSpec, Path, float], ManagedServer]
"""(arm name, spec with its port, log path, startup timeout) -> the server process to start, not yet started."""


@dataclass(frozen=True)
class Launcher:
    serve_argv: list[str]
    env: dict[str, str]
    specs: dict[str, ServerSpec]  # launched arm name -> its spec; the runner sets the port
    client_cpus: frozenset[int] | None = None  # the load generator's cores while a launched block runs; None: as it is
    server: ServerFactory | None = None  # None: ``vllm serve`` (serve_argv) as a ManagedServer


LaunchResolver = Callable[[CheckPlan, Callable[[str], None]], Launcher]
