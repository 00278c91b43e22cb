"""One vLLM server of a pool, as the proxy sends to it and the pool watcher reads it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Upstream"]


@dataclass(frozen=True)
class Upstream:
    base_url: str  # e.g. http://127.0.0.1:8001 (no trailing slash)
    metrics_url: str  # its /metrics
