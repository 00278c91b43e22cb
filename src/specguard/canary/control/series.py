"""The controller's own Prometheus series, exported on the admin API's ``/metrics`` whatever carries the traffic.

Behind HAProxy or a Gateway no proxy runs, so before issue 28 the admin API's registry was empty there and the
generated weight panel, the error-rate alert and a rollback alert had nothing to read. Everything here is
derived from the events the controller appends (``CanaryStore.on_event``), so the series say what the event
log says and the controller needs no second bookkeeping:

* ``specguard_canary_events_total{kind}``: every event by kind (``decision``, ``critical``, ``drift``, ...);
* ``specguard_canary_decisions_total{kind}``: decisions and manual actions by what they decided;
* ``specguard_canary_candidate_weight``, ``..._control_weight`` and ``..._step``: the state after each event;
* ``specguard_canary_window_value{pool,metric,segment}`` and ``..._window_samples``: the evidence the last
  window was judged on (each pool's value of each budget metric and how many observations it rested on).

With the proxy the weight, step and decision series are the proxy's own (``ProxyMetrics``: the same names,
set as the shares change), so ``weights=False`` leaves them out of a registry that already has them.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from specguard.canary.state.records import CanaryEvent

__all__ = ["ControllerSeries"]


class ControllerSeries:
    def __init__(self, registry: CollectorRegistry, *, weights: bool, has_control: bool = False) -> None:
        r = registry
        self.events = Counter(
            "specguard_canary_events", "Events the controller appended to its log, by kind", ("kind",), registry=r
        )
        self.window_value = Gauge(
            "specguard_canary_window_value",
            "Each pool's value of each budget metric in the last judged window (ms for latencies, a ratio for errors)",
            ("pool", "metric", "segment"),
            registry=r,
        )
        self.window_samples = Gauge(
            "specguard_canary_window_samples",
            "Observations each pool's value rested on in the last judged window",
            ("pool", "metric", "segment"),
            registry=r,
        )
        self.weights = weights
        self.has_control = has_control
        if weights:
            self.candidate_weight = Gauge("specguard_canary_candidate_weight", "Candidate share of new requests", registry=r)
            self.control_weight = Gauge("specguard_canary_control_weight", "Control share of new requests", registry=r)
            self.step = Gauge("specguard_canary_step", "The rollout step (0-based)", registry=r)
            self.decisions = Counter("specguard_canary_decisions", "Controller decisions by kind", ("kind",), registry=r)

    def observe(self, event: CanaryEvent) -> None:
        """One appended event (the store calls this after the event is durable)."""
        self.events.labels(kind=event.kind).inc()
        if event.kind == "window":
            self._window(event.details.get("analysis") or {})
        if not self.weights:
            return
        candidate = event.percent / 100.0
        self.candidate_weight.set(candidate)
        # The controller's rule (CanaryController._shares): the control pool gets the candidate's share until
        # the candidate has all of it; a rollback (0 %) and a promotion (100 %) leave it none.
        self.control_weight.set(candidate if self.has_control and candidate < 1.0 else 0.0)
        self.step.set(event.step)
        if event.kind in ("decision", "manual") and event.decision is not None:
            self.decisions.labels(kind=event.decision).inc()

    def _window(self, analysis: dict[str, Any]) -> None:
        for result in analysis.get("results") or []:
            for pool in ("baseline", "candidate"):
                labels = {"pool": pool, "metric": str(result.get("metric")), "segment": str(result.get("segment"))}
                value = result.get(f"{pool}_value")
                if value is not None:
                    self.window_value.labels(**labels).set(float(value))
                self.window_samples.labels(**labels).set(float(result.get(f"n_{pool}") or 0))
