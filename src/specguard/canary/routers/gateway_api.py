"""The Kubernetes Gateway API engine: the canary's weights as an ``HTTPRoute`` with weighted ``backendRefs``.

A fleet on Kubernetes already routes through a Gateway; the canary moves traffic by changing the weights of
one route rule's two backends (baseline and candidate, plus a control when the rollout has one). Weights are
integers, split in proportion (the v1 schema allows 0..1,000,000 per backend). specguard's weights always sum
to ``GATEWAY_WEIGHT_TOTAL`` = 1,000,000, the largest total that fits: at 100 % the candidate carries all of it.
So a weight is millionths of the traffic, 1 % is 10,000, and a step with up to four decimals (the rollout file
refuses others with this engine) is carried exactly, with no rounding between the step and the route.
A rollback renders the candidate (and the control) at weight 0: the Gateway sends them no new request.

``render_httproute`` is pure. ``write_route_files`` writes each step's route to its own file and to the
current one, each atomically, for a GitOps pipeline or an operator to apply. ``GatewayApiRouter`` does both at
every ``set_weights`` and, with ``apply: true``, runs ``kubectl apply -f`` on the step's file (an argument
list, bounded in time, killed with its process group on timeout, as a hook is); each window it reads the
route back (``kubectl get httproute NAME -n NAMESPACE -o json``) and compares it with the route it rendered
(``gateway_readback.route_drift``: the weights, and the Gateway's ``Accepted``/``ResolvedRefs`` conditions).
With ``apply: false`` specguard only writes files: there is nothing of its own to read back, and the router
says so where it describes itself and with every rollback.

The apply and read-back paths need a cluster; the tests here have none, so they check the rendered objects
against the HTTPRoute v1 schema, the files, the error for a missing ``kubectl``, the comparison on route JSON
shaped by that schema, and, with a scripted ``kubectl`` (fault injection), the commands and their failures.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard.canary.control.hooks import run_hook
from specguard.canary.routers.base import EngineRouter
from specguard.canary.routers.gateway_readback import route_drift
from specguard.canary.spec.engine import GATEWAY_WEIGHT_TOTAL, BackendRef, GatewayApiEngine
from specguard.errors import OutputWriteError, RuntimeFailure, UsageError
from specguard.results.store import write_yaml_atomic

__all__ = [
    "ANNOTATION_PREFIX",
    "API_VERSION",
    "GatewayApiRouter",
    "RouteFiles",
    "find_kubectl",
    "kubectl_apply",
    "kubectl_get_route",
    "render_httproute",
    "route_file_names",
    "weight_units",
    "write_route_files",
]

API_VERSION = "gateway.networking.k8s.io/v1"
ANNOTATION_PREFIX = "specguard"
# A float fraction such as 0.07 is 70000.00000000001 millionths: anything closer than this to a whole
# number is that number; anything farther is a share the route cannot carry exactly, and is refused.
_UNIT_TOLERANCE = 1e-6


def weight_units(fraction: float, what: str = "weight") -> int:
    """``fraction`` of the traffic (0..1) in millionths, exactly; ValueError if it is not a whole number of them."""
    if not math.isfinite(fraction) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"{what} must be a fraction of the traffic in [0, 1] (got {fraction!r})")
    units = fraction * GATEWAY_WEIGHT_TOTAL
    whole = round(units)
    if abs(units - whole) > _UNIT_TOLERANCE:
        raise ValueError(f"{what} {fraction!r} is not a whole number of millionths of the traffic")
    return whole


def _backend(ref: BackendRef, weight: int) -> dict[str, Any]:
    out: dict[str, Any] = {"group": ref.group or "", "kind": ref.kind, "name": ref.name}
    if ref.namespace is not None:
        out["namespace"] = ref.namespace
    if ref.port is not None:
        out["port"] = ref.port
    out["weight"] = weight
    return out


def _percent_text(units: int) -> str:
    return f"{units / (GATEWAY_WEIGHT_TOTAL / 100):g}"


def render_httproute(
    engine: GatewayApiEngine, candidate_weight: float, step: int, rollout_id: str, *, control_weight: float = 0.0
) -> dict[str, Any]:
    """The HTTPRoute that gives the candidate ``candidate_weight`` of new requests (a fraction, 0 at rollback).

    The baseline gets the rest (less the control's share, with a control backend); the route's annotations
    say which rollout and which step (the controller's 0-based index) it belongs to and the candidate's percent.
    """
    candidate = weight_units(candidate_weight, "candidate weight")
    control = weight_units(control_weight, "control weight")
    if control and engine.backends.control is None:
        raise ValueError("a control weight without a control backend")
    if candidate + control > GATEWAY_WEIGHT_TOTAL:
        raise ValueError(f"candidate and control weights sum past the whole traffic ({candidate_weight} + {control_weight})")
    if step < 0:
        raise ValueError(f"step is the controller's 0-based index (got {step})")
    refs = [
        _backend(engine.backends.baseline, GATEWAY_WEIGHT_TOTAL - candidate - control),
        _backend(engine.backends.candidate, candidate),
    ]
    if engine.backends.control is not None:
        refs.append(_backend(engine.backends.control, control))
    gateway = engine.gateway
    parent: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name}
    if gateway.namespace is not None:
        parent["namespace"] = gateway.namespace
    if gateway.section_name is not None:
        parent["sectionName"] = gateway.section_name
    return {
        "apiVersion": API_VERSION,
        "kind": "HTTPRoute",
        "metadata": {
            "name": engine.route,
            "namespace": engine.namespace,
            "labels": {"app.kubernetes.io/managed-by": "specguard"},
            "annotations": {
                f"{ANNOTATION_PREFIX}/rollout-id": rollout_id,
                f"{ANNOTATION_PREFIX}/step": str(step),
                f"{ANNOTATION_PREFIX}/candidate-percent": _percent_text(candidate),
            },
        },
        "spec": {"parentRefs": [parent], "rules": [{"backendRefs": refs}]},
    }


@dataclass(frozen=True)
class RouteFiles:
    """The files one rendered route was written to: the step's own, and the current route."""

    step: Path
    current: Path


def route_file_names(route: str, step: int, candidate_units: int) -> tuple[str, str]:
    """(the step's file name, the current file's name): one file per step and candidate weight.

    The weight is in the name because a step can be rendered twice with different weights (a rollback at
    step 3 renders step 3 at 0 %; an operator's promote renders it at 100 %), and neither may hide the other.
    """
    return f"{route}.step-{step:02d}.candidate-{_percent_text(candidate_units)}pct.yaml", f"{route}.yaml"


def write_route_files(route: Mapping[str, Any], out_dir: Path) -> RouteFiles:
    """Write ``route`` (as ``render_httproute`` returns it) to its step's file, then to the current file.

    The step's file first: the current file always has a step file with the same content. Each is replaced
    atomically, so a pipeline watching the directory never reads half a route. OutputWriteError if the
    directory cannot be written.
    """
    meta = route["metadata"]
    step = int(meta["annotations"][f"{ANNOTATION_PREFIX}/step"])
    candidate = int(route["spec"]["rules"][0]["backendRefs"][1]["weight"])
    step_name, current_name = route_file_names(str(meta["name"]), step, candidate)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_yaml_atomic(out_dir / step_name, route)
        write_yaml_atomic(out_dir / current_name, route)
    except OSError as exc:
        raise OutputWriteError(f"engine.out_dir {out_dir}: cannot write the HTTPRoute: {exc}") from exc
    return RouteFiles(step=out_dir / step_name, current=out_dir / current_name)


def find_kubectl(path_env: str | None, out_dir: str) -> str:
    """The kubectl program on ``path_env`` (a PATH value); UsageError saying what is missing if there is none."""
    found = shutil.which("kubectl", path=path_env)
    if found is None:
        raise UsageError(
            f"engine.apply is true, but kubectl is not on PATH ({path_env or ''}): install kubectl (and a kubeconfig "
            f"for the cluster), or set 'apply: false' to only write the HTTPRoutes to {out_dir}"
        )
    return found


async def kubectl_apply(path: Path, kubectl: str, timeout_s: float, env: Mapping[str, str] | None = None) -> None:
    """``kubectl apply -f PATH``; RuntimeFailure with kubectl's own words if it fails or runs past ``timeout_s``."""
    attempt = (await run_hook([kubectl, "apply", "-f", str(path)], timeout_s=timeout_s, env=env))[-1]
    if attempt.ok:
        return
    how = f"timed out after {timeout_s:g} s" if attempt.timed_out else f"exited with {attempt.exit_code}"
    said = (attempt.stderr or attempt.stdout).strip()
    raise RuntimeFailure(f"kubectl apply -f {path} {how}" + (f": {said}" if said else ""))


async def kubectl_get_route(
    name: str, namespace: str, kubectl: str, timeout_s: float, env: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The HTTPRoute as the cluster has it (``kubectl get httproute NAME -n NAMESPACE -o json``); None when the
    cluster says it does not exist; RuntimeFailure with kubectl's words when kubectl fails otherwise (the
    cluster cannot be reached) or does not answer with a JSON object."""
    argv = [kubectl, "get", "httproute", name, "-n", namespace, "-o", "json"]
    attempt = (await run_hook(argv, timeout_s=timeout_s, env=env))[-1]
    said = (attempt.stderr or attempt.stdout).strip()
    if not attempt.ok:
        if "(NotFound)" in said:  # kubectl's "Error from server (NotFound): httproutes... not found"
            return None
        how = f"timed out after {timeout_s:g} s" if attempt.timed_out else f"exited with {attempt.exit_code}"
        raise RuntimeFailure(f"{' '.join(argv[1:])} {how}" + (f": {said}" if said else ""))
    try:
        route = json.loads(attempt.stdout)
    except ValueError as exc:
        raise RuntimeFailure(f"{' '.join(argv[1:])} answered what is not JSON: {attempt.stdout[:300]!r}") from exc
    if not isinstance(route, dict):
        raise RuntimeFailure(f"{' '.join(argv[1:])} answered JSON that is not an object: {attempt.stdout[:300]!r}")
    return route


class GatewayApiRouter(EngineRouter):
    """``TrafficRouter`` for ``engine: gateway-api``: renders, writes and (with ``apply``) applies each step's route.

    Calls are serialised: a rollback issued while a step's ``kubectl apply`` runs is applied after it, never
    before (the older step would otherwise overwrite the rollback in the cluster). ``env`` is kubectl's
    environment (default: this process's), and its PATH is where kubectl is looked for, at construction, so a
    missing kubectl is an error before any traffic moves. ``clock`` (monotonic seconds) times the Gateway's
    ``status_wait_s`` after each apply.
    """

    def __init__(
        self,
        engine: GatewayApiEngine,
        rollout_id: str,
        *,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.rollout_id = rollout_id
        self.out_dir = Path(engine.out_dir)
        self._env = dict(env) if env is not None else None
        path_env = (self._env if self._env is not None else os.environ).get("PATH", os.defpath)
        self.kubectl = find_kubectl(path_env, engine.out_dir) if engine.apply else None
        self.written: list[RouteFiles] = []
        self._clock = clock
        self._applied_at: float | None = None
        # The route's generation as last read, and since when the Gateway has had it to report on.
        self._generation: object = None
        self._generation_since: float | None = None
        self._last_read: float | None = None
        self._lock = asyncio.Lock()

    async def set_weights(self, candidate: float, control: float, step: int) -> None:
        route = render_httproute(self.engine, candidate, step, self.rollout_id, control_weight=control)
        async with self._lock:
            files = write_route_files(route, self.out_dir)
            self.written.append(files)
            if self.kubectl is not None:
                await kubectl_apply(files.step, self.kubectl, self.engine.kubectl_timeout_s, self._env)
                self._applied_at = self._clock()

    async def differs(self, candidate: float, control: float) -> str | None:
        """The route read back against the one these shares render (``gateway_readback.route_drift``); None with
        ``apply: false`` (specguard applied nothing: ``describe`` and ``weights_note`` say so) or when it agrees.
        RuntimeFailure when kubectl cannot reach the cluster."""
        if self.kubectl is None:
            return None
        expected = render_httproute(self.engine, candidate, 0, self.rollout_id, control_weight=control)
        async with self._lock:
            live = await kubectl_get_route(
                self.engine.route, self.engine.namespace, self.kubectl, self.engine.kubectl_timeout_s, self._env
            )
            settled = self._settled(live)
        if live is None:
            return f"HTTPRoute {self.engine.namespace}/{self.engine.route} not found"
        return "; ".join(route_drift(live, expected, settled=settled)) or None

    def _settled(self, live: Mapping[str, Any] | None) -> bool:
        """Whether the Gateway has had ``status_wait_s`` to report on the route's generation as read now.

        Timed per generation, not per apply: applying an unchanged route leaves its generation as it was, so
        a Gateway that never reported on it is still named when the controller's re-check follows its re-apply
        (and the rollout pauses), while a route edited under the canary and applied back is a new generation
        that gets its wait. A generation's wait starts at the apply that made it when one came since the last
        read, else at the read that first saw it."""
        now = self._clock()
        generation = ((live or {}).get("metadata") or {}).get("generation")
        if self._generation_since is None or generation != self._generation:
            applied_since_read = self._applied_at is not None and (self._last_read is None or self._applied_at >= self._last_read)
            self._generation = generation
            self._generation_since = self._applied_at if applied_since_read and self._applied_at is not None else now
        self._last_read = now
        return now - self._generation_since >= self.engine.status_wait_s

    def weights_note(self) -> str | None:
        """With ``apply: false`` a weight change (a rollback too) is only a file: say so, with the file to apply."""
        if self.kubectl is not None or not self.written:
            return None
        return (
            f"route written, not applied (engine.apply: false): kubectl apply -f {self.written[-1].step}; "
            "specguard applied nothing, so it reads nothing back"
        )

    def describe(self) -> str:
        if self.kubectl is not None:
            how = "applied with kubectl and read back every window"
        else:
            how = f"written to {self.out_dir}, not applied (engine.apply: false), so not read back"
        return f"engine gateway-api (HTTPRoute {self.engine.namespace}/{self.engine.route}, {how})"

    async def close(self) -> None:
        # Nothing is held between calls; waiting for the lock lets a kubectl apply in progress finish.
        async with self._lock:
            pass
