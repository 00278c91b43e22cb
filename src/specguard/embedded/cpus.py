"""Which cores the embedded vLLM CPU server and the measuring client get, so that neither times the other. Pure.

On a quiet 2-core machine ``specguard demo`` warned 17 times that the client was late (send lag p99 up to
250 ms at 4 requests/s) because the vLLM CPU server's OpenMP threads and the client shared both cores. The
rule: the client gets the lowest allowed core, alone; the server gets every other core, its OpenMP threads
bound there with ``VLLM_CPU_OMP_THREADS_BIND`` (vLLM CPU's own binding) and, where ``taskset`` exists, the
whole process kept there too (its HTTP and tokenizer threads as well). A check's launched arms run one at a
time (``check/runner.py`` restarts the server for every block), so both arms get the same server cores.

- 3 cores or more: client on one core, the server on the rest.
- 2 cores: client on one, the server on the other: a server of one thread is slower than on two, the same
  for both arms, and the client's timestamps are its own.
- 1 core: nothing can be separated; no binding, and a note says the client's timestamps will share the core.
The client's helpers (record writer, scraper) run at idle priority (``lifetime.yield_cpu``) on the client's
core: they take no time the client wants.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CoreAssignment", "assign_cores", "cpu_list"]


@dataclass(frozen=True)
class CoreAssignment:
    client: frozenset[int] | None  # None: leave the client's affinity alone
    server: frozenset[int] | None  # None: no binding
    note: str

    def server_env(self) -> dict[str, str]:
        """vLLM CPU's OpenMP binding for the server's cores (nothing when there is no binding)."""
        if self.server is None:
            return {}
        return {"VLLM_CPU_OMP_THREADS_BIND": cpu_list(self.server), "OMP_NUM_THREADS": str(len(self.server))}

    def server_prefix(self, taskset: str | None) -> list[str]:
        """``taskset -c CORES`` before the server's command, when ``taskset`` is there and there is a binding."""
        if self.server is None or taskset is None:
            return []
        return [taskset, "-c", cpu_list(self.server)]


def cpu_list(cpus: frozenset[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``"0-2,5"``: the format of ``VLLM_CPU_OMP_THREADS_BIND`` and ``taskset -c``."""
    parts: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            parts.append(_span(run))
            run = []
        run.append(c)
    if run:
        parts.append(_span(run))
    return ",".join(parts)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def assign_cores(allowed: set[int] | frozenset[int]) -> CoreAssignment:
    """The client's and the server's cores out of the ``allowed`` ones (this process's affinity)."""
    if len(allowed) < 2:
        return CoreAssignment(
            client=None,
            server=None,
            note=f"{len(allowed)} CPU: the client and the vLLM CPU server share it; expect client-lag warnings",
        )
    client = frozenset({min(allowed)})
    server = frozenset(allowed) - client
    return CoreAssignment(
        client=client,
        server=server,
        note=f"client on CPU {cpu_list(client)}, the vLLM CPU server on CPU {cpu_list(server)}",
    )
