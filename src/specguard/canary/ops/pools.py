"""The rollout's pools as upstreams: the servers it names, and the ones specguard launches from ``launch`` specs.

A pool with servers is used as it is (``launch`` then only describes them, for ``canary units``). A pool with
a ``launch`` spec and no servers is started here, on the embedded runtime when it names ``embedded:`` models
(as a check plan's launched arm is), on a free port, and stopped when the canary stops; its process is
watched: one that exits is a crash of that pool. Each pool's inventory (what ``specguard inventory`` pins)
is taken once, at start, for the report.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.rollout import Pool, Rollout
from specguard.canary.spec.vocabulary import PoolName
from specguard.errors import ServerError
from specguard.vllm.process import ManagedServer, ServerStartError
from specguard.vllm.urls import server_root

__all__ = ["StartedPools", "start_pools"]

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
    for name, pool in pools.items():
        if name in started.upstreams:
            continue
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
