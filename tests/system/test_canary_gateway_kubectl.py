"""The Gateway API engine's ``kubectl apply`` and read-back, with a scripted fake ``kubectl`` (fault injection: no
cluster runs here, so no real kubectl can fail or answer): a failing apply is reported with its words and the
route files are kept; the route read back every window drives the controller's drift handling (issue 28).

The system tier (the fake kubectl runs as a process); the rendered routes and the missing-kubectl error are in
tests/unit/canary/test_gateway_api.py, whose engine builder this test shares.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from specguard.canary.routers.gateway_api import GatewayApiRouter
from specguard.errors import RuntimeFailure
from tests.unit.canary.test_controller_loop import FakeEvidence, Loop
from tests.unit.canary.test_gateway_api import engine


async def test_a_failing_kubectl_is_reported_with_its_words_and_the_files_are_kept(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"  # a scripted fake: no cluster here to make a real kubectl fail on
    fake.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/argv"\necho "error: the server could not be reached" >&2\nexit 1\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "routes"
    driver = GatewayApiRouter(engine(apply=True, out_dir=str(out)), "r", env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})
    with pytest.raises(RuntimeFailure, match="exited with 1: error: the server could not be reached"):
        await driver.set_weights(0.01, 0.0, 0)
    step_file = driver.written[-1].step
    assert step_file.exists() and (bin_dir / "argv").read_text().split() == ["apply", "-f", str(step_file)]


# A scripted kubectl that keeps one HTTPRoute as a cluster would (fault injection: no cluster runs here).
# ``apply -f FILE`` stores the route, with the next generation when its spec changed (as the API server
# counts), and the Gateway's Accepted and ResolvedRefs conditions for that generation; ``get httproute NAME
# -n NS -o json`` prints it (or kubectl's NotFound). The scenario file injects the faults: "unreachable",
# "resolvedrefs-false", "gateway-down" (the Gateway writes no status any more).
FAKE_KUBECTL = r"""#!{python}
import json, pathlib, sys
import yaml
here = pathlib.Path(sys.argv[0]).parent
store, scenario = here / "route.json", (here / "scenario").read_text().strip() if (here / "scenario").exists() else ""
with open(here / "calls", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\n")
if scenario == "unreachable":
    sys.stderr.write("The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?\n")
    sys.exit(1)
if sys.argv[1] == "apply":
    route = yaml.safe_load(open(sys.argv[3]))
    old = json.loads(store.read_text()) if store.exists() else {{"metadata": {{"generation": 0}}, "spec": None}}
    generation = old["metadata"]["generation"] + (route["spec"] != old["spec"])
    route["metadata"]["generation"] = generation
    bad = scenario == "resolvedrefs-false"
    conditions = [
        {{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "observedGeneration": generation,
          "lastTransitionTime": "2026-12-04T20:00:00Z"}},
        {{"type": "ResolvedRefs", "status": "False" if bad else "True", "reason": "BackendNotFound" if bad else "ResolvedRefs",
          "message": "InferencePool vllm-speculative not found" if bad else "", "observedGeneration": generation,
          "lastTransitionTime": "2026-12-04T20:00:00Z"}},
    ]
    parent = dict(route["spec"]["parentRefs"][0])
    route["status"] = {{"parents": [{{"parentRef": parent, "controllerName": "example.net/gateway", "conditions": conditions}}]}}
    if scenario == "gateway-down":
        route["status"] = old.get("status", {{}})
    store.write_text(json.dumps(route))
    print("httproute.gateway.networking.k8s.io/" + route["metadata"]["name"] + " configured")
elif sys.argv[1:4] == ["get", "httproute", sys.argv[3]]:
    if not store.exists():
        sys.stderr.write('Error from server (NotFound): httproutes.gateway.networking.k8s.io "' + sys.argv[3] + '" not found\n')
        sys.exit(1)
    print(store.read_text())
else:
    sys.exit(2)
"""


def scripted_kubectl(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"
    fake.write_text(FAKE_KUBECTL.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return bin_dir


async def test_the_route_is_read_back_every_window_drift_is_applied_again_and_a_refusal_pauses(tmp_path: Path) -> None:
    """The controller's read-back with the real router and a scripted kubectl: a route edited under the canary
    is a ``drift`` event and applied again; a backend the Gateway cannot resolve pauses the rollout with a
    critical event in the Gateway's words; a cluster that cannot be reached pauses it as an ``engine`` event."""
    bin_dir = scripted_kubectl(tmp_path)
    now = [0.0]
    router = GatewayApiRouter(
        engine(apply=True, out_dir=str(tmp_path / "routes"), status_wait_s=5.0),
        "r",
        env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"},
        clock=lambda: now[0],
    )
    loop = Loop(tmp_path, FakeEvidence())
    loop.controller.traffic = router
    await loop.controller._apply_weights(loop.controller.state)  # step 1: 10 %
    assert await router.differs(0.1, 0.0) is None
    calls = (bin_dir / "calls").read_text().splitlines()
    assert calls[-1] == "get httproute llama-canary -n inference -o json"

    # Someone edits the route back to 0 % (a GitOps sync of an older commit): drift, applied again.
    stored = json.loads((bin_dir / "route.json").read_text())
    stored["spec"]["rules"][0]["backendRefs"][1]["weight"] = 0
    stored["metadata"]["generation"] += 1
    for c in stored["status"]["parents"][0]["conditions"]:
        c["observedGeneration"] = stored["metadata"]["generation"]  # the Gateway took the edit
    (bin_dir / "route.json").write_text(json.dumps(stored))
    now[0] += 60.0
    await loop.controller._reconcile()
    [drift] = loop.events("drift")
    assert drift.details["reported"] == "backendRef InferencePool/inference/vllm-speculative weight 0 (set 100000)"
    assert loop.controller.state.status == "running" and not loop.events("critical")
    assert json.loads((bin_dir / "route.json").read_text())["spec"]["rules"][0]["backendRefs"][1]["weight"] == 100000

    # The Gateway cannot resolve the candidate's pool: applying again does not help, so the rollout pauses.
    (bin_dir / "scenario").write_text("resolvedrefs-false")
    await loop.controller._apply_weights(loop.controller.state)
    await loop.controller._reconcile()
    [critical] = loop.events("critical")
    assert "ResolvedRefs False (BackendNotFound: InferencePool vllm-speculative not found)" in critical.reasons[0]
    assert loop.controller.state.status == "paused" and loop.store.load_state().status == "paused"

    # kubectl cannot reach the cluster: the engine cannot be reached.
    (bin_dir / "scenario").write_text("unreachable")
    await loop.controller._reconcile()
    [lost] = loop.events("engine")
    assert "cannot be reached" in lost.reasons[0] and "connection to the server 127.0.0.1:6443 was refused" in lost.reasons[0]


async def test_a_deleted_route_is_drift_and_applied_again(tmp_path: Path) -> None:
    bin_dir = scripted_kubectl(tmp_path)
    router = GatewayApiRouter(
        engine(apply=True, out_dir=str(tmp_path / "routes")), "r", env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"}
    )
    assert await router.differs(0.1, 0.0) == "HTTPRoute inference/llama-canary not found"
    await router.set_weights(0.1, 0.0, 0)
    assert await router.differs(0.1, 0.0) is None


async def test_without_apply_nothing_is_read_back_and_that_is_said(tmp_path: Path) -> None:
    router = GatewayApiRouter(engine(out_dir=str(tmp_path / "routes")), "r", env={"PATH": "/nonexistent"})
    await router.set_weights(0.0, 0.0, 3)
    assert await router.differs(0.25, 0.0) is None
    assert "not applied (engine.apply: false), so not read back" in router.describe()
    note = router.weights_note()
    assert note is not None and note.startswith("route written, not applied") and "reads nothing back" in note


async def test_a_gateway_that_never_reports_on_the_new_weights_pauses_the_rollout(tmp_path: Path) -> None:
    """The API server took the route but the Gateway's controller is down: its conditions stay on the older
    generation, whose weights its data plane may still serve. Within ``status_wait_s`` that is normal; past it,
    it is drift, applying the unchanged route again changes nothing (same generation), and the rollout pauses."""
    bin_dir = scripted_kubectl(tmp_path)
    now = [0.0]
    router = GatewayApiRouter(
        engine(apply=True, out_dir=str(tmp_path / "routes"), status_wait_s=30.0),
        "r",
        env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"},
        clock=lambda: now[0],
    )
    loop = Loop(tmp_path, FakeEvidence())
    loop.controller.traffic = router
    await router.set_weights(0.05, 0.0, 0)  # generation 1, reported on
    (bin_dir / "scenario").write_text("gateway-down")
    now[0] = 100.0
    await loop.controller._apply_weights(loop.controller.state)  # 10 %: generation 2, no report on it
    await loop.controller._reconcile()
    assert not loop.events("drift"), "within status_wait_s a report on the older generation is not drift"
    now[0] = 160.0
    await loop.controller._reconcile()
    [drift] = loop.events("drift")
    assert "Accepted is for generation 1, the route is at 2" in drift.details["reported"]
    [critical] = loop.events("critical")
    assert (
        "still reports parent Gateway/gateways/inference-gateway section http: Accepted is for generation 1"
        in (critical.reasons[0])
    )
    assert loop.controller.state.status == "paused"


async def test_a_kubectl_answer_that_is_not_a_route_is_a_runtime_failure_with_its_words(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"  # a kubectl whose plugin or wrapper prints a banner instead of JSON
    fake.write_text('#!/bin/sh\necho "Welcome to the staging cluster"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    router = GatewayApiRouter(engine(apply=True, out_dir=str(tmp_path / "routes")), "r", env={"PATH": str(bin_dir)})
    with pytest.raises(RuntimeFailure, match="get httproute llama-canary -n inference -o json answered what is not JSON"):
        await router.differs(0.1, 0.0)
