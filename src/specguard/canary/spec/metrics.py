"""The rollout file's ``metrics:`` key: where the analysis reads the pools' server-side metrics.

``metrics: scrape`` (the default, also when the key is absent) reads each server's ``/metrics`` directly, as
the canary always has. ``prometheus`` reads the operator's Prometheus instead (``url``), for pools whose
servers specguard cannot reach, behind HAProxy or a Gateway; its series must carry the ``specguard_pool``
target label that ``specguard canary observability`` documents. A union discriminated by ``source``, as
``engine:`` is by ``type`` (``spec/engine.py``), and like it a bare word is ``{source: WORD}``; errors
keep the file's key path (the union's tag taken out) so that they name the right line.

The bearer token is never in the file, only the name of the variable holding it (``token_env``), as for
the admin API. ``step_s`` is Prometheus' scrape interval for the pools' jobs: the range queries ask for one
point per scrape, and a smaller step would only repeat samples.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, WrapValidator, field_validator

from specguard.canary.spec.validators import EnvName, bare_word_union
from specguard.models_base import FiniteModel
from specguard.validation import HttpUrl
from specguard.vllm.knowledge import Version, VersionParseError, parse_version

__all__ = ["EngineResponses", "Metrics", "PrometheusMetrics", "ScrapeMetrics", "validate_metrics"]


class ScrapeMetrics(FiniteModel):
    """Each server's ``/metrics``, read by specguard at every analysis tick."""

    source: Literal["scrape"] = "scrape"


class EngineResponses(FiniteModel):
    """The engine's own response counters in Prometheus, for the error rate when HAProxy's socket is not read (a
    Gateway: Envoy's, Istio's, kgateway's metrics are each their own): two PromQL expressions of cumulative
    counts whose result has one series per pool, labelled ``specguard_pool`` (``label_replace`` maps a
    cluster or backend label onto it). Both are read at each window's start and end; the differences are the
    window's 5xx and responses per pool."""

    errors: str = Field(min_length=1, description="cumulative 5xx responses, one series per specguard_pool")
    total: str = Field(min_length=1, description="cumulative responses, one series per specguard_pool")


class PrometheusMetrics(FiniteModel):
    """A Prometheus server's HTTP API (instant and range PromQL queries)."""

    source: Literal["prometheus"]
    url: HttpUrl = Field(description="Prometheus' base URL, e.g. http://127.0.0.1:9090")
    token_env: EnvName | None = Field(default=None, description="environment variable holding a bearer token")
    step_s: float = Field(default=15.0, gt=0, le=3600, description="the pools' scrape interval in Prometheus")
    engine_responses: EngineResponses | None = Field(
        default=None, description="the engine's response counters, for the error rate behind a Gateway"
    )
    timeout_s: float = Field(default=10.0, gt=0, description="per query")
    vllm_version: str | None = Field(
        default=None, description="the pools' vLLM release, whose metric names are queried (default: what the servers report)"
    )

    @field_validator("vllm_version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_version(value)
            except VersionParseError as exc:
                raise ValueError(str(exc)) from None
        return value

    @property
    def release(self) -> Version | None:
        return parse_version(self.vllm_version) if self.vllm_version else None


# A bare word is ``{source: WORD}``; an error's location loses the union's tag, as ``validate_engine``'s does.
validate_metrics = bare_word_union("source")


Metrics = Annotated[
    Annotated[ScrapeMetrics | PrometheusMetrics, Field(discriminator="source")],
    WrapValidator(validate_metrics),
]
