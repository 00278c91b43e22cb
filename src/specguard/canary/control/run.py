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
import functools
import os
import signal
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from specguard.canary.control.admin import admin_app, admin_ssl_context, read_token, remote_without_tls_warning
from specguard.canary.control.controller import CanaryController
from specguard.canary.control.series import ControllerSeries
from specguard.canary.evidence.metrics_source import PoolMetricsSource, PrometheusSource, ScrapeSource, engine_response_counts
from specguard.canary.evidence.pool_watch import PoolWatcher
from specguard.canary.evidence.records import RecordsEvidence
from specguard.canary.evidence.scrape import PoolScraper
from specguard.canary.evidence.server_side import CountsReader, ServerSideEvidence
from specguard.canary.judge.policy import analysis_policy
from specguard.canary.notify.grafana import (
    DASHBOARD_INVENTORY,
    GrafanaAnnotations,
    dashboard_record,
    read_grafana_token,
)
from specguard.canary.observability.dashboard import dashboard_uid
from specguard.canary.ops.pools import StartedPools, start_pools
from specguard.canary.proxy.server import CanaryProxy, tune_gc
from specguard.canary.proxy.workers import ProxyWorkers
from specguard.canary.routers.factory import build_router
from specguard.canary.routers.haproxy import HAProxyRuntime
from specguard.canary.spec.engine import HAProxyEngine, ProxyEngine
from specguard.canary.spec.metrics import PrometheusMetrics
from specguard.canary.spec.rollout import Rollout, split_listen
from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state.records import CanaryEvent, CanaryStatus, ProxiedRequest
from specguard.canary.state.store import CanaryStore, StoreMeta
from specguard.errors import OptionError, ServerError
from specguard.server_metrics.prometheus_api import PrometheusApi
from specguard.vllm.knowledge import Version, VersionParseError, parse_version

__all__ = ["CanaryOutcome", "run_canary"]


@dataclass(frozen=True)
class CanaryOutcome:
    status: CanaryStatus
    interrupted: bool  # stopped by a signal (or the caller's stop event) rather than by finishing
    state_lost: str | None = None  # the state file was deleted or replaced while the canary ran: nothing was saved


async def _site(
    app: web.Application,
    listen: str,
    what: str,
    shutdown_s: float,
    ssl_context: ssl.SSLContext | None = None,
    reuse_port: bool = False,
) -> web.AppRunner:
    host, port = split_listen(listen)
    # handler_cancellation: a client that goes away cancels its handler, which closes the upstream request.
    runner = web.AppRunner(app, shutdown_timeout=shutdown_s, access_log=None, handler_cancellation=True)
    await runner.setup()
    try:
        # backlog: 256 clients connecting at once overflowed aiohttp's default of 128, and the kernel's retry of a
        # dropped SYN after 1 s showed as 1-3 s TTFT spikes in bench/proxy_overhead.py.
        await web.TCPSite(runner, host, port, backlog=1024, ssl_context=ssl_context, reuse_port=reuse_port or None).start()
    except OSError as exc:
        await runner.cleanup()
        raise ServerError(f"the {what} cannot listen on {listen}: {exc.strerror or exc}") from exc
    return runner


def _also(first: Callable[[CanaryEvent], None], then: Callable[[CanaryEvent], None] | None) -> Callable[[CanaryEvent], None]:
    """One event observer, then another (the controller's series, then the command line's printer) when there is one."""
    if then is None:
        return first

    def both(event: CanaryEvent) -> None:
        first(event)
        then(event)

    return both


async def run_canary(
    rollout: Rollout,
    *,
    log: Callable[[str], None],
    log_dir: Path,
    exit_when_finished: bool = False,
    drain_s: float = 30.0,
    stop: asyncio.Event | None = None,
    on_event: Callable[[CanaryEvent], None] | None = None,
) -> CanaryOutcome:
    """``on_event``: called with each event as it is appended (``canary run --json`` prints them), after the series."""
    token = read_token(rollout.admin)  # refused before anything starts
    admin_tls = admin_ssl_context(rollout.admin)
    if (plain := remote_without_tls_warning(rollout.admin)) is not None:
        log(plain)
    grafana_token = read_grafana_token(rollout.grafana) if rollout.grafana is not None else None
    prometheus_token = read_metrics_token(rollout)
    state_path = Path(rollout.state.path)
    meta = StoreMeta(rollout_name=rollout.name, rollout=rollout.stored(), created_unix=time.time())
    store = CanaryStore.create_or_open(state_path, meta)
    store.on_event = on_event
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
        if not isinstance(rollout.engine, ProxyEngine):
            status = await _run_with_engine(
                rollout, pools, store, token, prometheus_token, annotations, stop, log, exit_when_finished, drain_s
            )
            return CanaryOutcome(status=status, interrupted=stop.is_set())
        registry = CollectorRegistry()
        # The weights, step and decisions are the proxy's series; the events and the evidence are the controller's.
        store.on_event = _also(ControllerSeries(registry, weights=False).observe, store.on_event)
        holder: list[CanaryController] = []

        def on_record(record: ProxiedRequest) -> None:
            holder[0].on_record(record)

        def worker_record(record: ProxiedRequest) -> None:
            proxy.metrics.observe(record)  # the admin API's /metrics counts every process's requests
            holder[0].on_record(record)

        # workers: N: N - 1 processes beside this one on the same port; their records reach the same callback.
        workers = ProxyWorkers(rollout.workers, on_record=worker_record, log=log) if rollout.workers > 1 else None
        proxy = CanaryProxy(pools.upstreams, rollout.split, on_record=on_record, registry=registry, seq_step=rollout.workers)

        evidence = RecordsEvidence(rollout, analysis_policy(rollout), PoolWatcher(pools.upstreams))
        controller = CanaryController(
            rollout, store, build_router(rollout, proxy, workers), evidence, log=log, drain_s=drain_s, annotations=annotations
        )
        holder.append(controller)
        if workers is not None:
            # After the controller has set the resumed weights: each worker listens with them from its first request.
            await workers.start(rollout.listen, pools.upstreams, rollout.split, drain_s=drain_s, log_dir=log_dir)
        try:
            proxy_runner = await _site(proxy.app(), rollout.listen, "proxy", drain_s, reuse_port=workers is not None)
            try:
                admin_runner = await _site(
                    admin_app(controller, token, registry, log), rollout.admin.listen, "admin API", 5.0, admin_tls
                )
            except ServerError:
                await proxy_runner.cleanup()
                raise
        except ServerError:
            if workers is not None:
                workers.kill()
            raise
        tune_gc()  # start-up is done: GC pauses of up to 74 ms stalled every stream (bench/proxy_overhead.py)
        processes = "" if workers is None else f" in {rollout.workers} processes (workers: pids {workers.pids} and this one)"
        log(
            f"canary {rollout.name}: proxy on {rollout.listen}{processes}, admin API on {rollout.admin.listen}, "
            f"state {state_path}"
        )
        try:
            status = await controller.run(stop, exit_when_finished=exit_when_finished)
        finally:
            # Stop taking requests, let those in flight finish up to the one drain deadline (the runner's shutdown
            # timeout: aiohttp cancels what is left then, recorded as cut at shutdown), then write. Before issue 28 a
            # second drain_s followed the runner's, and streams were cut at twice the deadline. Every worker drains
            # under the same deadline at the same time.
            deadline = loop.time() + drain_s
            proxy.begin_shutdown()
            stopping = asyncio.ensure_future(workers.stop()) if workers is not None else None
            await proxy_runner.cleanup()
            still = await proxy.drain(max(0.0, deadline - loop.time()))
            cut = proxy.cut_at_shutdown
            if stopping is not None:
                worker_still, worker_cut = await stopping
                still, cut = still + worker_still, cut + worker_cut
            await admin_runner.cleanup()
            await proxy.close()
            await evidence.close()
            if annotations is not None:
                await annotations.close()  # what is still queued gets grafana.timeout_s, then is logged as not posted
            controller.on_stopped(still, cut_at_shutdown=cut, drain_s=drain_s)
        return CanaryOutcome(status=status, interrupted=stop.is_set(), state_lost=controller.state_lost)
    finally:
        if annotations is not None:
            await annotations.close()  # a no-op after the close above; here for a start that failed half-way
        for sig in installed:
            loop.remove_signal_handler(sig)
        if pools is not None:
            await asyncio.to_thread(pools.stop)
        store.close()


def read_metrics_token(rollout: Rollout) -> str | None:
    """The Prometheus bearer token, from the variable ``metrics.token_env`` names; refused before anything starts."""
    metrics = rollout.metrics
    if not isinstance(metrics, PrometheusMetrics) or metrics.token_env is None:
        return None
    value = os.environ.get(metrics.token_env)
    if not value:
        raise OptionError(f"metrics.token_env: the environment variable {metrics.token_env} is not set (or empty)")
    return value


def _release(rollout: Rollout, pools: StartedPools) -> Version:
    """The vLLM release whose metric names Prometheus is asked for: the file's, else the candidate's, else the baseline's."""
    if isinstance(rollout.metrics, PrometheusMetrics) and rollout.metrics.release is not None:
        return rollout.metrics.release
    seen = []
    for pool in ("candidate", "baseline"):
        text = str(pools.inventories.get(pool, {}).get("vllm_version") or "")
        seen.append(text)
        try:
            return parse_version(text)
        except VersionParseError:
            continue
    raise OptionError(
        f"metrics.vllm_version: the pools report no vLLM release ({', '.join(repr(v) for v in seen)}); "
        "name the release whose metric names Prometheus holds"
    )


async def _run_with_engine(
    rollout: Rollout,
    pools: StartedPools,
    store: CanaryStore,
    token: str,
    prometheus_token: str | None,
    annotations: GrafanaAnnotations | None,
    stop: asyncio.Event,
    log: Callable[[str], None],
    exit_when_finished: bool,
    drain_s: float,
) -> CanaryStatus:
    """HAProxy or a Gateway carries the requests: no proxy; the driver moves the weights, the pools' own series
    (and HAProxy's response counters) are the evidence, through the same controller."""
    router = build_router(rollout)
    source: PoolMetricsSource
    counts: CountsReader | None = None
    # One scraper for the watcher and a scrape source: each page read and parsed once per tick.
    scraper = PoolScraper(pools.upstreams, histograms=not isinstance(rollout.metrics, PrometheusMetrics))
    watcher = PoolWatcher(pools.upstreams, scraper=scraper)
    if isinstance(rollout.metrics, PrometheusMetrics):
        api = PrometheusApi(str(rollout.metrics.url), prometheus_token, rollout.metrics.timeout_s)
        source = PrometheusSource(api, list(pools.upstreams), _release(rollout, pools), rollout.metrics.step_s)
        responses = rollout.metrics.engine_responses
        if responses is not None:

            async def counts(at: float) -> dict[PoolName, tuple[float, float]]:
                return await engine_response_counts(api, responses.errors, responses.total, at)

    else:
        source = ScrapeSource(pools.upstreams, scraper=scraper)
    haproxy = rollout.engine if isinstance(rollout.engine, HAProxyEngine) else None
    stats = None
    if haproxy is not None:
        # HAProxy's counters on the router's runtime socket (one command per connection: nothing is shared).
        stats = functools.partial(HAProxyRuntime(haproxy.socket).show_stat, haproxy.backend)
    evidence = ServerSideEvidence(
        source,
        analysis_policy(rollout),
        list(rollout.analysis.metrics),
        watcher,
        haproxy=haproxy,
        stats=stats,
        counts=counts,
    )
    # No proxy exports anything here: the controller's own series are all the admin API's /metrics has.
    registry = CollectorRegistry()
    series = ControllerSeries(registry, weights=True, has_control=rollout.pools.control is not None)
    store.on_event = _also(series.observe, store.on_event)
    controller = CanaryController(rollout, store, router, evidence, log=log, drain_s=drain_s, annotations=annotations)
    admin_runner = await _site(
        admin_app(controller, token, registry, log),
        rollout.admin.listen,
        "admin API",
        5.0,
        admin_ssl_context(rollout.admin),
    )
    log(
        f"canary {rollout.name}: {router.describe()}, metrics from {source.kind}, "
        f"admin API on {rollout.admin.listen}, state {rollout.state.path}"
    )
    try:
        status = await controller.run(stop, exit_when_finished=exit_when_finished)
    finally:
        await admin_runner.cleanup()
        await router.close()
        await evidence.close()
        if annotations is not None:
            await annotations.close()
        controller.on_stopped(0)
    return status
