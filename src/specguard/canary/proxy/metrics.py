"""The proxy's own Prometheus metrics, in a registry of their own (the controller serves it on the admin listener).

Latencies are observed per upstream attempt from the same record the controller analyses, so the
dashboards and the decisions see the same numbers. Buckets are in milliseconds: TTFT and E2E from 5 ms to
2 minutes (a long answer on a loaded pool), per-token ITL from 0.5 ms to 1 s (a decode step of a small model
on a GPU is a few ms; a CPU test server's 20-100 ms).

The ITL histogram still counts one observation per token, but a request's tokens are added at once
(``observe_per_token``: bucket counts from ``bisect``, one ``inc`` per bucket touched) instead of one
``Histogram.observe`` per token: 64 observes cost about 120 us per request at 256 streams
(bench/proxy_overhead.py), the aggregated form a few us; the exported series are the same.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specguard.analysis.request_metrics import per_token_itl
from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state.records import ProxiedRequest

__all__ = ["E2E_BUCKETS_MS", "ITL_BUCKETS_MS", "TTFT_BUCKETS_MS", "ProxyMetrics", "observe_per_token"]

TTFT_BUCKETS_MS = (5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0)
E2E_BUCKETS_MS = (25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0, 120000.0)
ITL_BUCKETS_MS = (0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0, 100.0, 250.0, 500.0, 1000.0)
POOLS: tuple[PoolName, ...] = ("baseline", "candidate", "control")


@dataclass(frozen=True)
class _Children:
    """One pool x segment's series, looked up once."""

    requests: Any
    errors: Any
    disconnects: Any
    ttft: Any
    e2e: Any
    itl: Any


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        labels = ("pool", "segment")
        self.requests = Counter("specguard_canary_requests", "Upstream attempts of completions/chat requests", labels, registry=r)
        self.errors = Counter(
            "specguard_canary_errors", "Upstream attempts that failed (client disconnects excluded)", labels, registry=r
        )
        self.disconnects = Counter(
            "specguard_canary_client_disconnects", "Requests whose client went away before the end", ("pool",), registry=r
        )
        self.ttft = Histogram("specguard_canary_ttft_ms", "Time to first token (ms)", labels, buckets=TTFT_BUCKETS_MS, registry=r)
        self.itl = Histogram(
            "specguard_canary_itl_ms", "Per-token inter-token latency (ms)", labels, buckets=ITL_BUCKETS_MS, registry=r
        )
        self.e2e = Histogram("specguard_canary_e2e_ms", "End-to-end latency (ms)", labels, buckets=E2E_BUCKETS_MS, registry=r)
        self.in_flight = Gauge("specguard_canary_in_flight", "Requests in flight upstream", ("pool",), registry=r)
        self.candidate_weight = Gauge("specguard_canary_candidate_weight", "Candidate share of new requests", registry=r)
        self.control_weight = Gauge("specguard_canary_control_weight", "Control share of new requests", registry=r)
        self.step = Gauge("specguard_canary_step", "The rollout step (0-based)", registry=r)
        self.decisions = Counter("specguard_canary_decisions", "Controller decisions by kind", ("kind",), registry=r)
        # The children kept: labels() takes a lock and builds its key on every call, twice per request here.
        self.in_flight_of = {pool: self.in_flight.labels(pool=pool) for pool in POOLS}
        for child in self.in_flight_of.values():
            child.set(0)
        self._children: dict[tuple[str, str], _Children] = {}

    def observe(self, record: ProxiedRequest) -> None:
        key = (record.pool, record.segment)
        children = self._children.get(key)
        if children is None:
            # labels() takes a lock and builds its key on every call: six per record added up at 256 streams.
            labels = {"pool": record.pool, "segment": record.segment}
            children = self._children[key] = _Children(
                self.requests.labels(**labels),
                self.errors.labels(**labels),
                self.disconnects.labels(pool=record.pool),
                self.ttft.labels(**labels),
                self.e2e.labels(**labels),
                self.itl.labels(**labels),
            )
        children.requests.inc()
        if record.client_disconnected:
            children.disconnects.inc()
        elif not record.ok:
            children.errors.inc()
        if record.ttft_s is not None:
            children.ttft.observe(record.ttft_s * 1000.0)
        if record.e2e_s is not None:
            children.e2e.observe(record.e2e_s * 1000.0)
        observe_per_token(children.itl, record.chunk_times_s, record.chunk_tokens)

    def count_decision(self, kind: str) -> None:
        self.decisions.labels(kind=kind).inc()


def observe_per_token(child: Any, chunk_times_s: Sequence[float], chunk_tokens: Sequence[int]) -> None:
    """Observe ``per_token_itl`` (in ms) into a Histogram child, as one ``observe`` per token would.

    A chunk gap of g before n tokens is n observations of g / n: its bucket gets n at once. Falls back to
    ``observe`` per token if prometheus_client's Histogram internals change (tests compare the two).
    """
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if (
        not isinstance(bounds, list)
        or not isinstance(buckets, list)
        or len(bounds) != len(buckets)
        or total is None
        or not hasattr(child, "_raise_if_not_observable")
    ):
        for gap in per_token_itl(chunk_times_s, chunk_tokens):
            child.observe(gap * 1000.0)
        return
    if len(chunk_times_s) != len(chunk_tokens):
        raise ValueError("chunk_times_s and chunk_tokens differ in length")
    counts: dict[int, int] = {}
    amount = 0.0
    for i in range(1, len(chunk_times_s)):
        n = chunk_tokens[i]
        if n <= 0:
            continue
        value = (chunk_times_s[i] - chunk_times_s[i - 1]) / n * 1000.0
        at = bisect.bisect_left(bounds, value)  # observe's bucket: the first bound >= the value
        counts[at] = counts.get(at, 0) + n
        amount += value * n
    if not counts:
        return
    child._raise_if_not_observable()
    total.inc(amount)
    for at, n in counts.items():
        buckets[at].inc(n)
