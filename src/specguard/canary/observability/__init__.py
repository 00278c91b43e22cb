"""``specguard canary observability``: Prometheus recording and alerting rules and a Grafana dashboard for a rollout.

The canary's own analysis needs none of this; an operator's monitoring stack does (the checklist: alerts on
P99 latency, waiting requests, KV-cache usage, OOMs and 5xx, and an acceptance view whose formula is written
down because vLLM's metric names change across releases). Modules: ``conventions`` (pool label, windows),
``rulefile`` (the rule-file models and YAML), ``recording``, ``alerts``, ``dashboard``, ``write``.
"""

from specguard.canary.observability.write import observability_files, write_observability

__all__ = ["observability_files", "write_observability"]
