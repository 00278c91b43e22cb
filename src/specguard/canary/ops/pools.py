"""The rollout's pools as upstreams: the servers it names, and the ones specguard launches from ``launch`` specs.

A pool with servers is used as it is (``launch`` then only describes them, for ``canary units``). A pool with
a ``launch`` spec and no servers is started here, on the embedded runtime when it names ``embedded:`` models
(as a check plan's launched arm is), on a free port, and stopped when the canary stops; its process is
watched: one that exits is a crash of that pool. Each pool's inventory (what ``specguard inventory`` pins)
is taken once, at start, for the report.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.rollout import Pool, Rollout
from specguard.canary.spec.vocabulary import PoolName
from specguard.errors import InputFileError, ServerError
from specguard.vllm.process import ManagedServer, ServerStartError
from specguard.vllm.urls import server_root

__all__ = ["HEALTH_TIMEOUT_S", "StartedPools", "check_pools_answer", "start_pools"]

HEALTH_TIMEOUT_S = 3.0  # per server and path: a healthy vLLM answers /health in milliseconds

POOL_NAMES: tuple[PoolName, ...] = ("baseline", "candidate", "control")


@dataclass
class StartedPools:
    upstreams: dict[PoolName, list[Upstream]]
    launched: dict[str, ManagedServer] = field(default_factory=dict)  # base URL -> the server specguard started
    inventories: dict[str, dict[str, Any]] = field(default_factory=dict)

    def stop(self) -> None:
        for server in self.launched.values():
            server.stop()


def _pools(rollout: Rollout) -> dict[PoolName, Pool]:
    out: dict[PoolName, Pool] = {"baseline": rollout.pools.baseline, "candidate": rollout.pools.candidate}
    if rollout.pools.control is not None:
        out["control"] = rollout.pools.control
    return out


def _answer(root: str) -> str | None:
    """None when the server answers 200 on ``/health`` or ``/v1/models``; else why not (the last path's error)."""
    why = ""
    for path in ("/health", "/v1/models"):
        try:
            with urllib.request.urlopen(f"{root}{path}", timeout=HEALTH_TIMEOUT_S) as resp:  # noqa: S310  the rollout's own URL
                if resp.status == 200:
                    return None
                why = f"{path}: HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            why = f"{path}: HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            why = f"{path}: {getattr(exc, 'reason', None) or exc}"
    return why


def check_launch_specs(pools: Mapping[PoolName, Pool], vllm_version: str) -> None:
    """Gate 0's rules on every launch spec's speculative config, for the runtime's vLLM, before any server starts: an
    error is an InputFileError (exit 2) naming ``pools.<name>.launch.speculative_config`` and what vLLM would refuse.
    Before issue 29 both servers started and vLLM's own refusal came minutes later."""
    from specguard.preflight.rules import RuleContext, check_config
    from specguard.vllm.knowledge import parse_version

    context = RuleContext(version=parse_version(vllm_version))
    problems = []
    for name, pool in pools.items():
        if pool.launch is None or pool.launch.speculative_config is None:
            continue
        for f in check_config(pool.launch.speculative_config, context):
            if f.severity == "error":
                problems.append(
                    f"pools.{name}.launch.speculative_config: {f.key}: {f.message}" + (f" ({f.fix})" if f.fix else "")
                )
    if problems:
        raise InputFileError(f"vLLM {vllm_version} would refuse the launch spec:\n  " + "\n  ".join(problems))


def check_pools_answer(pools: Mapping[PoolName, list[str]], log: Callable[[str], None]) -> None:
    """Every pool has a server that answers before the first weight is set: a ServerError (exit 4) naming a pool none
    of whose servers answer, a warning for a server that does not while others of its pool do. Before issue 28,
    ``canary run`` with both pools unreachable started, served errors and said "INCONCLUSIVE" every window."""
    with ThreadPoolExecutor(max(1, sum(len(v) for v in pools.values()))) as ex:
        answers = {name: list(ex.map(_answer, servers)) for name, servers in pools.items()}
    for name, servers in pools.items():
        silent = [f"{url} ({why})" for url, why in zip(servers, answers[name], strict=True) if why is not None]
        if servers and len(silent) == len(servers):
            raise ServerError(f"the {name} pool does not answer on any of its servers: {'; '.join(silent)}")
        for line in silent:
            log(f"warning: a server of the {name} pool does not answer: {line}")


def start_pools(rollout: Rollout, log_dir: Path, log: Callable[[str], None]) -> StartedPools:
    """Every pool's upstreams; launched pools started and ready (or a ServerError naming the pool and its log)."""
    from specguard.embedded.launch import launches_embedded, server_spec_for
    from specguard.embedded.models import ensure_models
    from specguard.embedded.runtime import ensure_runtime
    from specguard.inventory.collect import from_server, from_spec
    from specguard.server_metrics.server_facts import inspect_server

    pools = _pools(rollout)
    started = StartedPools(upstreams={})
    to_launch = {name: p for name, p in pools.items() if not p.servers and p.launch is not None}
    if to_launch:
        runtime = ensure_runtime(log=log)
        check_launch_specs(to_launch, runtime.vllm_version)  # before any server starts: vLLM would refuse it later
        models = ensure_models(runtime) if launches_embedded(p.launch for p in to_launch.values()) else None
        servers: dict[PoolName, ManagedServer] = {}
        for name, pool in to_launch.items():
            assert pool.launch is not None
            spec = server_spec_for(pool.launch, models, pool.launch.port)
            servers[name] = ManagedServer(
                spec,
                runtime.serve_argv,
                log_dir / f"vllm-{name}.log",
                runtime_env=runtime.env,
                startup_timeout_s=pool.launch.startup_timeout_s,
            )
        try:
            for name, server in servers.items():
                log(f"starting the {name} pool's vLLM server; log: {server.log_path}")
                server.start()  # from this (the main) thread: the server dies with specguard
            with ThreadPoolExecutor(len(servers)) as ex:
                list(ex.map(ManagedServer.wait_ready, servers.values()))
        except ServerStartError as exc:
            for server in servers.values():
                server.stop()
            raise ServerError(f"a pool's server would not start:\n{exc}") from exc
        for name, server in servers.items():
            started.upstreams[name] = [Upstream(server.base_url, server.metrics_url)]
            started.launched[server.base_url] = server
            started.inventories[name] = from_spec(server.spec, inspect_server(server.base_url), f"canary {name} pool").model_dump(
                mode="json"
            )
    given = {name: pool for name, pool in pools.items() if name not in started.upstreams}
    check_pools_answer({name: [server_root(s.base_url) for s in pool.servers] for name, pool in given.items()}, log)
    for name, pool in given.items():
        started.upstreams[name] = [
            Upstream(server_root(s.base_url), s.metrics_url or f"{server_root(s.base_url)}/metrics") for s in pool.servers
        ]
        first = started.upstreams[name][0].base_url
        try:
            spec_cfg = pool.launch.speculative_config if pool.launch is not None else None
            started.inventories[name] = from_server(inspect_server(first), spec_cfg, None).model_dump(mode="json")
        except Exception as exc:  # an inventory that cannot be taken is noted, not fatal: the pool may be warming up
            started.inventories[name] = {"error": f"inventory of {first} failed: {exc}"}
    return started
