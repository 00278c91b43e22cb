"""The router a rollout's ``engine:`` names, built in one place."""

from __future__ import annotations

from specguard.canary.routers.base import TrafficRouter
from specguard.canary.routers.gateway_api import GatewayApiRouter
from specguard.canary.routers.haproxy import HAProxyRouter
from specguard.canary.routers.proxy import ProxyRouter, ProxyWorkerSet, WeightedProxy
from specguard.canary.spec.engine import GatewayApiEngine, HAProxyEngine, ProxyEngine
from specguard.canary.spec.rollout import Rollout

__all__ = ["build_router"]


def build_router(rollout: Rollout, proxy: WeightedProxy | None = None, workers: ProxyWorkerSet | None = None) -> TrafficRouter:
    """The rollout's router; ``proxy`` is specguard's proxy, given exactly when ``engine: proxy`` (with its other
    processes as ``workers`` when the rollout has ``workers`` above 1)."""
    engine = rollout.engine
    if isinstance(engine, ProxyEngine):
        if proxy is None:
            raise ValueError("engine: proxy needs the proxy it routes with")
        return ProxyRouter(proxy, workers)
    if proxy is not None:
        raise ValueError(f"engine: {engine.type} carries the requests itself; no proxy is started for it")
    if isinstance(engine, HAProxyEngine):
        return HAProxyRouter(engine)
    if isinstance(engine, GatewayApiEngine):
        return GatewayApiRouter(engine, rollout.name)
    raise AssertionError(f"engine {engine!r}: no router")  # the Engine union has three members
