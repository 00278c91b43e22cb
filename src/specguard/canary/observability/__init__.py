"""``specguard canary observability``: Prometheus recording and alerting rules and a Grafana dashboard for a rollout.

The canary's own analysis needs none of this; an operator's monitoring stack does (the checklist: alerts on
P99 latency, waiting requests, KV-cache usage, OOMs and 5xx, and an acceptance view whose formula is written
down because vLLM's metric names change across releases). Modules: ``conventions`` (pool label, windows),
``rulefile`` (the rule-file models and YAML), ``recording``, ``alerts``, ``dashboard``, ``write``. The rollout's
``grafana:`` key is ``spec.grafana``; posting decisions to Grafana while the canary runs is ``notify.grafana``.

May import: ``spec`` only (the generated files describe a rollout; nothing here runs with it).

The names below are imported when first used, so that importing one module of this package does not import
``write`` and everything it renders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specguard.canary.observability.write import dashboard_pin_for, observability_files, write_observability

__all__ = ["dashboard_pin_for", "observability_files", "write_observability"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from specguard.canary.observability import write

        return getattr(write, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
