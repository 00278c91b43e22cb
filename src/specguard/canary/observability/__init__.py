"""``specguard canary observability``: Prometheus recording and alerting rules and a Grafana dashboard for a rollout.

The canary's own analysis needs none of this; an operator's monitoring stack does (the checklist: alerts on
P99 latency, waiting requests, KV-cache usage, OOMs and 5xx, and an acceptance view whose formula is written
down because vLLM's metric names change across releases). Modules: ``conventions`` (pool label, windows),
``rulefile`` (the rule-file models and YAML), ``recording``, ``alerts``, ``dashboard``, ``write``; and
``grafana_config`` / ``annotations``, the decisions posted to Grafana while the canary runs.

The two names below are imported when first used: ``rollout.py`` imports ``grafana_config`` from this
package, and an eager import of ``write`` here would import ``rollout.py`` back before it is defined.
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
