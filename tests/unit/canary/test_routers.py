"""``build_router``: the rollout's ``engine:`` picks the router, and every router is a ``TrafficRouter``."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.canary.routers.base import TrafficRouter
from specguard.canary.routers.factory import build_router
from specguard.canary.routers.gateway_api import GatewayApiRouter
from specguard.canary.routers.haproxy import HAProxyRouter
from specguard.canary.routers.proxy import ProxyRouter
from specguard.canary.spec.engine import GatewayApiEngine
from specguard.canary.spec.rollout import load_rollout
from specguard.canary.spec.vocabulary import PoolName

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


class Proxy:
    def set_weights(self, candidate: float, control: float, step: int) -> None: ...
    def in_flight(self) -> dict[PoolName, int]:
        return {}

    def count_decision(self, kind: str) -> None: ...


def test_each_engine_builds_its_router_and_only_the_proxy_engine_takes_a_proxy(tmp_path: Path) -> None:
    proxy_rollout = load_rollout(EXAMPLES / "rollout-embedded.yaml")
    haproxy_rollout = load_rollout(EXAMPLES / "rollout-haproxy.yaml")
    gateway = GatewayApiEngine.model_validate(
        {
            "type": "gateway-api",
            "route": "llama-canary",
            "namespace": "inference",
            "gateway": {"name": "inference-gateway", "namespace": "gateways"},
            "backends": {
                "baseline": {"kind": "Service", "name": "vllm-baseline", "port": 8000},
                "candidate": {"kind": "Service", "name": "vllm-speculative", "port": 8001},
            },
            "out_dir": str(tmp_path / "routes"),
        }
    )
    gateway_rollout = haproxy_rollout.model_copy(update={"engine": gateway})
    routers = [build_router(proxy_rollout, Proxy()), build_router(haproxy_rollout), build_router(gateway_rollout)]
    assert [type(r) for r in routers] == [ProxyRouter, HAProxyRouter, GatewayApiRouter]
    assert all(isinstance(r, TrafficRouter) for r in routers)
    assert [r.immediate for r in routers] == [True, False, False], "only the proxy's shares change at once"
    assert [r.describe().split(" (")[0] for r in routers] == ["engine proxy", "engine haproxy", "engine gateway-api"]
    assert "llama-canary" in routers[2].describe() and haproxy_rollout.engine.backend in routers[1].describe()  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="needs the proxy"):
        build_router(proxy_rollout)
    with pytest.raises(ValueError, match="carries the requests itself"):
        build_router(haproxy_rollout, Proxy())
