"""The Gateway API engine: every rendered HTTPRoute is valid against the HTTPRoute v1 schema, weights included.

The schema is the CRD's ``openAPIV3Schema`` kept in ``shared/reference/gateway-api/`` (its README says where it
comes from); ``jsonschema`` checks its structure, types, enums, lengths and bounds, not its CEL rules (the
API server evaluates those: the rollout model checks the one that matters here, a Service's port).

The ``kubectl apply`` path is exercised only where a cluster exists; there is none here. What is tested of it:
the error for a missing kubectl (a PATH without one), and, with a scripted fake ``kubectl`` that fails (fault
injection, a process: tests/system/test_canary_gateway_kubectl.py), that its failure is reported with its words
and the route files are kept.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from specguard.canary.routers.base import TrafficRouter
from specguard.canary.routers.gateway_api import (
    ANNOTATION_PREFIX,
    API_VERSION,
    GatewayApiRouter,
    render_httproute,
    weight_units,
    write_route_files,
)
from specguard.canary.spec.engine import GATEWAY_WEIGHT_TOTAL, INFERENCE_POOL_GROUP, GatewayApiEngine
from specguard.canary.spec.rollout import DEFAULT_STEPS
from specguard.errors import UsageError

# A copy of ../shared/reference/gateway-api/ (its README there and here says where it comes from), kept in the
# repository so that a checkout without the shared folder beside it still runs this test.
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "data" / "gateway-api" / "httproute-v1.openapi.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
BACKEND_REFS_SCHEMA = SCHEMA["properties"]["spec"]["properties"]["rules"]["items"]["properties"]["backendRefs"]
WEIGHT_SCHEMA = BACKEND_REFS_SCHEMA["items"]["properties"]["weight"]
# Steps the rollout file allows with this engine: the defaults and shares with up to four decimals.
STEPS: list[float] = sorted({*DEFAULT_STEPS, 0.0001, 0.5, 12.3456, 33.3333, 99.9999})

SERVICE = {"kind": "Service", "name": "vllm-baseline", "port": 8000}
POOL = {"kind": "InferencePool", "name": "vllm-speculative"}
SERVICE_CANDIDATE = {"kind": "Service", "name": "vllm-speculative", "port": 8001}


def engine(candidate: dict[str, Any] | None = None, **extra: Any) -> GatewayApiEngine:
    return GatewayApiEngine.model_validate(
        {
            "type": "gateway-api",
            "route": "llama-canary",
            "namespace": "inference",
            "gateway": {"name": "inference-gateway", "namespace": "gateways", "sectionName": "http"},
            "backends": {"baseline": SERVICE, "candidate": candidate or POOL, **extra.pop("backends", {})},
            **extra,
        }
    )


def schema_errors(route: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(route)]


def weights(route: dict[str, Any]) -> list[int]:
    return [ref["weight"] for ref in route["spec"]["rules"][0]["backendRefs"]]


def test_the_schema_is_a_valid_schema_with_the_bounds_the_engine_relies_on() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    # The weights sum to the largest weight one backend may carry: at 100 % the candidate carries all of it.
    assert (WEIGHT_SCHEMA["minimum"], WEIGHT_SCHEMA["maximum"]) == (0, GATEWAY_WEIGHT_TOTAL)


@pytest.mark.parametrize("percent", STEPS)
@pytest.mark.parametrize("candidate", [POOL, SERVICE_CANDIDATE], ids=["pool", "service"])
def test_every_step_renders_a_valid_route_carrying_the_step_exactly(percent: float, candidate: dict[str, Any]) -> None:
    route = render_httproute(engine(candidate), percent / 100, 3, "rollout-7")
    assert schema_errors(route) == []
    baseline, cand = weights(route)
    assert all(WEIGHT_SCHEMA["minimum"] <= w <= WEIGHT_SCHEMA["maximum"] for w in (baseline, cand))
    assert baseline + cand == GATEWAY_WEIGHT_TOTAL
    # Exactly the step's share, as a rational number: no rounding between the rollout file and the route.
    assert Fraction(cand, baseline + cand) == Fraction(str(percent)) / 100


def test_a_rollback_gives_the_candidate_weight_zero_and_stays_valid() -> None:
    route = render_httproute(engine(), 0.0, 4, "rollout-7")
    assert schema_errors(route) == []
    assert weights(route) == [GATEWAY_WEIGHT_TOTAL, 0]
    assert route["metadata"]["annotations"][f"{ANNOTATION_PREFIX}/candidate-percent"] == "0"


def test_the_route_names_its_parent_backends_rollout_and_step() -> None:
    route = render_httproute(engine(), 0.25, 3, "rollout-7")
    assert (route["apiVersion"], route["kind"]) == (API_VERSION, "HTTPRoute")
    assert route["metadata"]["name"] == "llama-canary" and route["metadata"]["namespace"] == "inference"
    annotations = route["metadata"]["annotations"]
    assert annotations[f"{ANNOTATION_PREFIX}/rollout-id"] == "rollout-7"
    assert annotations[f"{ANNOTATION_PREFIX}/step"] == "3"
    assert annotations[f"{ANNOTATION_PREFIX}/candidate-percent"] == "25"
    [parent] = route["spec"]["parentRefs"]
    assert (parent["kind"], parent["name"], parent["namespace"], parent["sectionName"]) == (
        "Gateway",
        "inference-gateway",
        "gateways",
        "http",
    )
    baseline, cand = route["spec"]["rules"][0]["backendRefs"]
    assert (baseline["group"], baseline["kind"], baseline["name"], baseline["port"]) == ("", "Service", "vllm-baseline", 8000)
    assert (cand["group"], cand["kind"], cand["name"]) == (INFERENCE_POOL_GROUP, "InferencePool", "vllm-speculative")
    assert "port" not in cand


def test_a_control_backend_takes_its_share_from_the_baseline() -> None:
    eng = engine(backends={"control": {"kind": "Service", "name": "vllm-control", "port": 8000}})
    route = render_httproute(eng, 0.1, 2, "r", control_weight=0.1)
    assert schema_errors(route) == []
    baseline, cand, control = weights(route)
    assert cand == control == weight_units(0.1) and baseline + cand + control == GATEWAY_WEIGHT_TOTAL
    assert weights(render_httproute(eng, 0.0, 2, "r")) == [GATEWAY_WEIGHT_TOTAL, 0, 0]


@pytest.mark.parametrize("bad", [WEIGHT_SCHEMA["maximum"] + 1, WEIGHT_SCHEMA["minimum"] - 1, 0.5])
def test_the_schema_rejects_a_hand_made_weight_out_of_its_bounds(bad: float) -> None:
    route = render_httproute(engine(), 0.5, 1, "r")
    route["spec"]["rules"][0]["backendRefs"][1]["weight"] = bad
    errors = schema_errors(route)
    assert errors and all(e.startswith("spec.rules.0.backendRefs.1.weight: ") for e in errors)


def test_the_schema_rejects_what_the_renderer_never_writes() -> None:
    # Too many backends, and a kind that is no Kubernetes kind: the validation is not a rubber stamp.
    route = render_httproute(engine(), 0.5, 1, "r")
    refs = route["spec"]["rules"][0]["backendRefs"]
    refs.extend(dict(refs[0], name=f"extra-{i}") for i in range(BACKEND_REFS_SCHEMA["maxItems"]))
    refs[1]["kind"] = "Inference Pool"
    assert {e.split(":")[0] for e in schema_errors(route)} == {"spec.rules.0.backendRefs", "spec.rules.0.backendRefs.1.kind"}


@pytest.mark.parametrize(
    ("candidate", "control", "message"),
    [
        (0.123456789, 0.0, "not a whole number of millionths"),
        (1.5, 0.0, r"in \[0, 1\]"),
        (float("nan"), 0.0, r"in \[0, 1\]"),
        (0.5, 0.1, "without a control backend"),
    ],
)
def test_weights_the_route_cannot_carry_are_refused(candidate: float, control: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_httproute(engine(), candidate, 1, "r", control_weight=control)


def test_candidate_and_control_cannot_sum_past_the_whole_traffic() -> None:
    eng = engine(backends={"control": {"kind": "Service", "name": "vllm-control", "port": 8000}})
    with pytest.raises(ValueError, match="sum past the whole traffic"):
        render_httproute(eng, 0.6, 1, "r", control_weight=0.5)


def test_the_writer_writes_the_steps_file_and_the_current_one(tmp_path: Path) -> None:
    route = render_httproute(engine(), 0.05, 1, "r")
    files = write_route_files(route, tmp_path / "routes")
    assert files.step.name == "llama-canary.step-01.candidate-5pct.yaml" and files.current.name == "llama-canary.yaml"
    assert yaml.safe_load(files.step.read_text()) == yaml.safe_load(files.current.read_text()) == route
    assert sorted(p.name for p in (tmp_path / "routes").iterdir()) == sorted([files.step.name, files.current.name])


async def test_the_driver_keeps_every_step_and_the_current_route_is_the_last(tmp_path: Path) -> None:
    out = tmp_path / "routes"
    driver = GatewayApiRouter(engine(out_dir=str(out)), "rollout-7")
    assert isinstance(driver, TrafficRouter)
    for step, percent in enumerate(DEFAULT_STEPS[:3]):
        await driver.set_weights(percent / 100, 0.0, step)
    await driver.set_weights(0.0, 0.0, 2)  # rollback at the third step
    await driver.close()
    step_files = sorted(p.name for p in out.iterdir() if ".step-" in p.name)
    assert step_files == sorted(f.step.name for f in driver.written) and len(step_files) == 4
    rollback = driver.written[-1].step
    assert rollback.name == "llama-canary.step-02.candidate-0pct.yaml"
    current = yaml.safe_load((out / "llama-canary.yaml").read_text())
    assert current == yaml.safe_load(rollback.read_text()) and weights(current) == [GATEWAY_WEIGHT_TOTAL, 0]
    for path in out.iterdir():
        assert schema_errors(yaml.safe_load(path.read_text())) == [], path.name
    assert not any(p.name.endswith(".tmp") for p in out.iterdir())


def test_apply_without_kubectl_on_path_says_what_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    with pytest.raises(UsageError, match="kubectl is not on PATH") as err:
        GatewayApiRouter(engine(apply=True, out_dir=str(tmp_path / "routes")), "r", env={"PATH": str(empty)})
    assert str(empty) in str(err.value) and "apply: false" in str(err.value)
    assert not (tmp_path / "routes").exists()  # refused before anything was written
    # Without apply, kubectl is not needed.
    assert GatewayApiRouter(engine(out_dir=str(tmp_path / "routes")), "r", env={"PATH": str(empty)}).kubectl is None
