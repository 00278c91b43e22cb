"""The Gateway API read-back (issue 28): a route as ``kubectl get httproute -o json`` returns it, compared with the
route specguard rendered for the shares it set.

Each read-back here is the rendered route as the API server returns it (``metadata.generation``, the API
server's defaults) with a ``status.parents`` entry per Gateway, and each is checked against the HTTPRoute v1
schema (status included: ``RouteParentStatus``, its conditions' required fields and enums), so the comparison
is tested on JSON shaped as a cluster would answer, not on dictionaries of convenience.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specguard.canary.routers.gateway_api import render_httproute
from specguard.canary.routers.gateway_readback import REQUIRED_CONDITIONS, route_drift
from tests.unit.canary.test_gateway_api import engine, schema_errors

CONTROLLER = "example.net/gateway-controller"


def condition(
    kind: str, status: str = "True", generation: int = 4, reason: str | None = None, message: str = ""
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason or (kind if status == "True" else "Pending"),
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": "2026-12-04T20:00:00Z",
    }


def parent_status(name: str = "inference-gateway", generation: int = 4, **conditions: str) -> dict[str, Any]:
    statuses = {kind: "True" for kind in REQUIRED_CONDITIONS} | conditions
    return {
        "parentRef": {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": name,
            "namespace": "gateways",
            "sectionName": "http",
        },
        "controllerName": CONTROLLER,
        "conditions": [condition(kind, status, generation) for kind, status in statuses.items()],
    }


def live(candidate: float, *parents: dict[str, Any], generation: int = 4) -> dict[str, Any]:
    """The route rendered for ``candidate``, as kubectl reads it back: generation, uid, and the Gateway's status."""
    route = copy.deepcopy(render_httproute(engine(apply=True), candidate, 2, "r"))
    route["metadata"] |= {"generation": generation, "uid": "5b1c6f1e-0000-4000-8000-000000000001", "resourceVersion": "81723"}
    route["status"] = {"parents": list(parents)}
    assert schema_errors(route) == [], "the read-back is a valid HTTPRoute, status included"
    return route


def expected(candidate: float) -> dict[str, Any]:
    return render_httproute(engine(apply=True), candidate, 2, "r")


@pytest.mark.parametrize("settled", [False, True])
def test_a_route_the_gateway_accepted_with_the_weights_set_agrees(settled: bool) -> None:
    assert route_drift(live(0.25, parent_status()), expected(0.25), settled=settled) == []


def test_weights_that_differ_are_named_by_backend_with_what_was_set() -> None:
    # Someone (or a GitOps sync of an older commit) put the route back at 0 %.
    said = route_drift(live(0.0, parent_status()), expected(0.25), settled=False)
    assert said == [
        "backendRef Service/inference/vllm-baseline weight 1000000 (set 750000)",
        "backendRef InferencePool/inference/vllm-speculative weight 0 (set 250000)",
    ]


def test_the_api_servers_defaults_are_the_same_backend_and_a_missing_weight_is_1() -> None:
    route = live(0.25, parent_status())
    baseline = route["spec"]["rules"][0]["backendRefs"][0]
    del baseline["group"], baseline["kind"]  # group "" and kind Service are the defaults
    assert route_drift(route, expected(0.25), settled=True) == []
    del baseline["weight"]
    assert route_drift(route, expected(0.25), settled=True) == [
        "backendRef Service/inference/vllm-baseline weight 1 (set 750000)"
    ]


def test_a_backend_missing_added_or_a_rule_more_is_a_difference() -> None:
    route = live(0.25, parent_status())
    refs = route["spec"]["rules"][0]["backendRefs"]
    refs[1] = {"group": "", "kind": "Service", "name": "vllm-other", "port": 8002, "weight": 250000}
    assert schema_errors(route) == []
    assert route_drift(route, expected(0.25), settled=True) == [
        "backendRef InferencePool/inference/vllm-speculative missing (set weight 250000)",
        "backendRef Service/inference/vllm-other weight 250000 (not set by specguard)",
    ]
    two = live(0.25, parent_status())
    two["spec"]["rules"].append(copy.deepcopy(two["spec"]["rules"][0]))
    assert schema_errors(two) == []
    assert route_drift(two, expected(0.25), settled=True) == ["2 rules (specguard set 1)"]


@pytest.mark.parametrize("kind", REQUIRED_CONDITIONS)
def test_a_condition_false_for_the_current_generation_is_reported_at_once_with_the_gateways_words(kind: str) -> None:
    status = parent_status()
    [c] = [c for c in status["conditions"] if c["type"] == kind]
    c |= {"status": "False", "reason": "BackendNotFound", "message": 'Service "vllm-speculative" not found'}
    said = route_drift(live(0.25, status), expected(0.25), settled=False)
    who = "parent Gateway/gateways/inference-gateway section http"
    assert said == [f'{who}: {kind} False (BackendNotFound: Service "vllm-speculative" not found)']


def test_every_parent_is_judged_not_only_the_first() -> None:
    other = parent_status("other-gateway", Accepted="False")
    said = route_drift(live(0.25, parent_status(), other), expected(0.25), settled=False)
    assert said == ["parent Gateway/gateways/other-gateway section http: Accepted False (Pending)"]


def test_an_unknown_status_is_not_true() -> None:
    said = route_drift(live(0.25, parent_status(ResolvedRefs="Unknown")), expected(0.25), settled=False)
    assert said == ["parent Gateway/gateways/inference-gateway section http: ResolvedRefs Unknown (Pending)"]


def test_a_missing_condition_is_a_difference_once_the_gateway_has_had_time_to_report() -> None:
    status = parent_status()
    status["conditions"] = [c for c in status["conditions"] if c["type"] != "ResolvedRefs"]
    route = live(0.25, status)
    assert route_drift(route, expected(0.25), settled=False) == []  # just applied: the Gateway writes status after
    assert route_drift(route, expected(0.25), settled=True) == [
        "parent Gateway/gateways/inference-gateway section http: ResolvedRefs missing"
    ]


def test_a_report_on_an_older_generation_is_a_difference_once_settled_even_if_it_said_true() -> None:
    # The Gateway's controller has not seen the route since generation 3: its data plane may still route
    # by the old weights, whatever the API server stores.
    route = live(0.25, parent_status(generation=3), generation=4)
    assert route_drift(route, expected(0.25), settled=False) == []
    assert route_drift(route, expected(0.25), settled=True) == [
        "parent Gateway/gateways/inference-gateway section http: Accepted is for generation 3, the route is at 4",
        "parent Gateway/gateways/inference-gateway section http: ResolvedRefs is for generation 3, the route is at 4",
    ]


def test_a_route_no_gateway_reported_on_is_a_difference_once_settled() -> None:
    route = live(0.25)
    route["status"] = {"parents": []}
    assert route_drift(route, expected(0.25), settled=False) == []
    assert route_drift(route, expected(0.25), settled=True) == [
        "parent Gateway/gateways/inference-gateway section http has not reported on the route (no status.parents entry)"
    ]
    del route["status"]  # a route no controller ever wrote status on has none at all
    assert len(route_drift(route, expected(0.25), settled=True)) == 1


def test_a_control_backend_is_compared_too() -> None:
    with_control = engine(apply=True, backends={"control": {"kind": "Service", "name": "vllm-control", "port": 8002}})
    want = render_httproute(with_control, 0.1, 1, "r", control_weight=0.1)
    have = copy.deepcopy(want)
    have["spec"]["rules"][0]["backendRefs"][2]["weight"] = 0
    assert route_drift(have, want, settled=False) == ["backendRef Service/inference/vllm-control weight 0 (set 100000)"]
