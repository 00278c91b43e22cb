"""``specguard canary run``: the pools, the proxy, the admin API and the controller, started and stopped in order.

Everything that can be refused is refused before anything listens or any server starts: the rollout
file (``load_rollout``), the admin token, a state file that belongs to another rollout. Then the launched
pools start, the proxy and the admin API bind their addresses, and the controller runs until SIGTERM or
SIGINT (or, with ``exit_when_finished``, until the rollout is promoted or rolled back).

A graceful stop (SIGTERM, as ``systemctl stop`` sends): the listeners close, streams in flight get
``drain_s`` to finish, every finished request is written, the state is saved, and the event log says so.
A restarted controller resumes at the same weight and step: sticky keys hash to the same pool.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from specguard.canary.admin import admin_app, read_token
from specguard.canary.controller import CanaryController
from specguard.canary.engines.config import ProxyEngine
from specguard.canary.observability.annotations import (
    DASHBOARD_INVENTORY,
    GrafanaAnnotations,
    dashboard_record,
    read_grafana_token,
)
from specguard.canary.observability.dashboard import dashboard_uid
from specguard.canary.pool_watch import PoolWatcher
from specguard.canary.pools import start_pools
from specguard.canary.proxy import CanaryProxy, tune_gc
from specguard.canary.records import CanaryStatus, ProxiedRequest
from specguard.canary.rollout import Rollout, split_listen
from specguard.canary.store import CanaryStore, StoreMeta
from specguard.errors import OptionError, ServerError

__all__ = ["CanaryOutcome", "run_canary"]


@dataclass(frozen=True)
class CanaryOutcome:
    status: CanaryStatus
    interrupted: bool  # stopped by a signal (or the caller's stop event) rather than by finishing


async def _site(app: web.Application, listen: str, what: str, shutdown_s: float) -> web.AppRunner:
    host, port = split_listen(listen)
    # handler_cancellation: a client that goes away cancels its handler, which closes the upstream request.
    runner = web.AppRunner(app, shutdown_timeout=shutdown_s, access_log=None, handler_cancellation=True)
    await runner.setup()
    try:
        # backlog: 256 clients connecting at once overflowed aiohttp's default of 128, and the kernel's retry of a
        # dropped SYN after 1 s showed as 1-3 s TTFT spikes in bench/proxy_overhead.py.
        await web.TCPSite(runner, host, port, backlog=1024).start()
    except OSError as exc:
        await runner.cleanup()
        raise ServerError(f"the {what} cannot listen on {listen}: {exc.strerror or exc}") from exc
    return runner


async def run_canary(
    rollout: Rollout,
    *,
    log: Callable[[str], None],
    log_dir: Path,
    exit_when_finished: bool = False,
    drain_s: float = 30.0,
    stop: asyncio.Event | None = None,
) -> CanaryOutcome:
    if not isinstance(rollout.engine, ProxyEngine):
        # The HAProxy and Gateway API engines have their models (and the Gateway API its driver), but the judge
        # still needs per-request records, which only the proxy makes; a Prometheus source is to come.
        raise OptionError(
            f"rollout {rollout.name!r}: engine {rollout.engine.type} is not driven by 'canary run' yet; "
            "only the built-in proxy (engine: proxy) is"
        )
    token = read_token(rollout.admin)  # refused before anything starts
    grafana_token = read_grafana_token(rollout.grafana) if rollout.grafana is not None else None
    state_path = Path(rollout.state.path)
    meta = StoreMeta(rollout_name=rollout.name, rollout=rollout.model_dump(mode="json"), created_unix=time.time())
    store = CanaryStore.create_or_open(state_path, meta)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (RuntimeError, ValueError):  # not the main thread (tests run the canary in one)
            pass
    pools = None
    annotations: GrafanaAnnotations | None = None
    try:
        pools = await asyncio.to_thread(start_pools, rollout, log_dir, log)
        for name, inventory in pools.inventories.items():
            store.save_inventory(name, inventory)
        if rollout.grafana is not None and grafana_token is not None:
            store.save_inventory(DASHBOARD_INVENTORY, dashboard_record(rollout, pools.inventories))
            annotations = GrafanaAnnotations(
                rollout.grafana,
                token=grafana_token,
                rollout_id=rollout.name,
                dashboard=rollout.grafana.dashboard_uid or dashboard_uid(rollout.name),
            )
            annotations.pin_inventories(store.inventories())
        registry = CollectorRegistry()
        holder: list[CanaryController] = []

        def on_record(record: ProxiedRequest) -> None:
            holder[0].on_record(record)

        proxy = CanaryProxy(pools.upstreams, rollout.split, on_record=on_record, registry=registry)
        watcher = PoolWatcher(pools.upstreams)
        controller = CanaryController(rollout, store, proxy, watcher, log=log, drain_s=drain_s, annotations=annotations)
        holder.append(controller)
        proxy_runner = await _site(proxy.app(), rollout.listen, "proxy", drain_s)
        try:
            admin_runner = await _site(admin_app(controller, token, registry, log), rollout.admin.listen, "admin API", 5.0)
        except ServerError:
            await proxy_runner.cleanup()
            raise
        tune_gc()  # start-up is done: GC pauses of up to 74 ms stalled every stream (bench/proxy_overhead.py)
        log(f"canary {rollout.name}: proxy on {rollout.listen}, admin API on {rollout.admin.listen}, state {state_path}")
        try:
            status = await controller.run(stop, exit_when_finished=exit_when_finished)
        finally:
            # Stop taking requests, let those in flight finish (the runner's shutdown timeout), then write.
            await proxy_runner.cleanup()
            still = await proxy.drain(drain_s)
            await admin_runner.cleanup()
            await proxy.close()
            await watcher.close()
            if annotations is not None:
                await annotations.close()  # what is still queued gets grafana.timeout_s, then is logged as not posted
            controller.on_stopped(still)
        return CanaryOutcome(status=status, interrupted=stop.is_set())
    finally:
        if annotations is not None:
            await annotations.close()  # a no-op after the close above; here for a start that failed half-way
        for sig in installed:
            loop.remove_signal_handler(sig)
        if pools is not None:
            await asyncio.to_thread(pools.stop)
        store.close()
