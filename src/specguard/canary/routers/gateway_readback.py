"""What a Gateway reports of the HTTPRoute specguard applied, against what specguard set. Pure.

Read back every window (issue 28: the engine is the truth) from ``kubectl get httproute NAME -o json``:

* the weights: every rule's ``backendRefs``, each backend matched by group, kind, namespace and name (the API
  server's defaults applied: group ``""``, kind ``Service``, weight 1), against the rendered route's one rule;
  a rule more or less, a backend missing or one specguard did not set is a difference too;
* the Gateway's word on it: for every parent in ``status.parents`` the ``Accepted`` and ``ResolvedRefs``
  conditions must be ``True`` (the v1 schema's ``RouteParentStatus``; ``Accepted`` False is a route the Gateway
  refused, ``ResolvedRefs`` False a backend it cannot resolve, such as a Service that does not exist), and
  the parent specguard names must have an entry. A condition set for an older generation of the route
  (``observedGeneration`` below ``metadata.generation``) says nothing of the weights just applied; it, a
  missing condition and a missing entry are differences only once the Gateway has had time to report
  (``settled``: the router's ``status_wait_s`` since that generation was applied), as a Gateway controller
  writes status after the API server has stored the route. A ``False`` for the current generation is a difference at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["REQUIRED_CONDITIONS", "backend_key", "route_drift"]

#: The route conditions every parent must report ``True``.
REQUIRED_CONDITIONS = ("Accepted", "ResolvedRefs")

BackendKey = tuple[str, str, str, str]


def backend_key(ref: Mapping[str, Any], route_namespace: str) -> BackendKey:
    """(group, kind, namespace, name) of a backendRef or parentRef, with the API server's defaults."""
    return (
        str(ref.get("group") or ""),
        str(ref.get("kind") or "Service"),
        str(ref.get("namespace") or route_namespace),
        str(ref.get("name", "")),
    )


def _backend_text(key: BackendKey) -> str:
    _, kind, namespace, name = key
    return f"backendRef {kind}/{namespace}/{name}"


def _weights(rule: Mapping[str, Any], namespace: str) -> dict[BackendKey, int]:
    refs: Sequence[Mapping[str, Any]] = rule.get("backendRefs") or []
    return {backend_key(ref, namespace): int(ref.get("weight", 1)) for ref in refs}


def _weight_drift(live: Mapping[str, Any], expected: Mapping[str, Any], namespace: str) -> list[str]:
    want = _weights(expected["spec"]["rules"][0], namespace)
    rules: Sequence[Mapping[str, Any]] = (live.get("spec") or {}).get("rules") or []
    out = [f"{len(rules)} rules (specguard set 1)"] if len(rules) != 1 else []
    for i, rule in enumerate(rules):
        where = f" in rule {i}" if len(rules) != 1 else ""
        have = _weights(rule, namespace)
        for key, weight in want.items():
            if key not in have:
                out.append(f"{_backend_text(key)} missing{where} (set weight {weight})")
            elif have[key] != weight:
                out.append(f"{_backend_text(key)} weight {have[key]}{where} (set {weight})")
        out += [f"{_backend_text(k)} weight {w}{where} (not set by specguard)" for k, w in have.items() if k not in want]
    return out


def _parent_text(ref: Mapping[str, Any], namespace: str) -> str:
    _, kind, ns, name = backend_key({"kind": "Gateway", **ref}, namespace)
    section = f" section {ref['sectionName']}" if ref.get("sectionName") else ""
    return f"parent {kind}/{ns}/{name}{section}"


def _condition_drift(entry: Mapping[str, Any], generation: int | None, namespace: str, settled: bool) -> list[str]:
    who = _parent_text(entry.get("parentRef") or {}, namespace)
    conditions = {c.get("type"): c for c in entry.get("conditions") or []}
    out: list[str] = []
    for kind in REQUIRED_CONDITIONS:
        c = conditions.get(kind)
        if c is None:
            if settled:
                out.append(f"{who}: {kind} missing")
            continue
        observed = c.get("observedGeneration")
        stale = generation is not None and observed is not None and int(observed) < generation
        if stale:
            if settled:
                out.append(f"{who}: {kind} is for generation {observed}, the route is at {generation}")
            continue
        if c.get("status") != "True":
            said = ": ".join(str(x) for x in (c.get("reason"), c.get("message")) if x)
            out.append(f"{who}: {kind} {c.get('status')}" + (f" ({said})" if said else ""))
    return out


def route_drift(live: Mapping[str, Any], expected: Mapping[str, Any], *, settled: bool) -> list[str]:
    """What the route read back (``live``, kubectl's JSON) reports where it differs from ``expected`` (the route
    specguard rendered for the shares it set), one phrase each; empty when the Gateway agrees.

    ``settled``: the Gateway has had time to report on the last apply, so a missing or older report is a
    difference too.
    """
    namespace = str(expected["metadata"]["namespace"])
    out = _weight_drift(live, expected, namespace)
    generation_value = (live.get("metadata") or {}).get("generation")
    generation = int(generation_value) if generation_value is not None else None
    parents: Sequence[Mapping[str, Any]] = (live.get("status") or {}).get("parents") or []
    for entry in parents:
        out += _condition_drift(entry, generation, namespace, settled)
    reported = {backend_key({"kind": "Gateway", **(p.get("parentRef") or {})}, namespace)[1:] for p in parents}
    for ref in expected["spec"]["parentRefs"]:
        key = backend_key(ref, namespace)[1:]
        if key not in reported and settled:
            out.append(f"{_parent_text(ref, namespace)} has not reported on the route (no status.parents entry)")
    return out
