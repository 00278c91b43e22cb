"""A small async client of Prometheus' HTTP API: instant and range PromQL queries, nothing else.

Behind HAProxy or a Gateway the pools' servers may be reachable only through the operator's Prometheus,
which already scrapes them; reading it (``/api/v1/query``, ``/api/v1/query_range``) gives specguard the
same series the operator's dashboards show. Only what the canary needs is modelled: the response envelope
(``status``, ``errorType``/``error``, ``warnings``) and vector, matrix and scalar results of float samples.
The models ignore keys they do not know (unlike specguard's own file formats): this is another project's
API, and a newer Prometheus adding a field (``infos`` in 2.45) must not break a rollout.

Errors map into specguard's hierarchy: Prometheus not answering is a ``PrometheusUnreachable``
(a ``ServerError``: the work cannot be carried out), a query Prometheus refuses is a ``PromQLError``
carrying Prometheus' own ``errorType`` and ``error``. The bearer token goes only into the request header;
no message, ``repr`` or log line holds it.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict, ValidationError

from specguard.errors import RuntimeFailure, ServerError

__all__ = ["PromQLError", "PrometheusApi", "PrometheusUnreachable", "Series", "parse_response"]


class PrometheusUnreachable(ServerError):
    """Prometheus did not answer (refused, timed out, not HTTP, or an answer that is not its API's JSON)."""

    code = "prometheus_unreachable"


class PromQLError(RuntimeFailure):
    """Prometheus answered and refused the query; ``error_type`` and ``error`` are its own words."""

    code = "promql_error"

    def __init__(self, query: str, error_type: str, error: str, status: int) -> None:
        super().__init__(
            f"Prometheus refused the query {query!r} (HTTP {status}, {error_type}): {error}",
            {"query": query, "errorType": error_type, "error": error, "http_status": status},
        )
        self.query = query
        self.error_type = error_type
        self.error = error


class _Api(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Result(_Api):
    metric: dict[str, str] = {}
    value: tuple[float, str] | None = None
    values: list[tuple[float, str]] | None = None


class _Data(_Api):
    resultType: Literal["vector", "matrix", "scalar", "string"]  # noqa: N815  the API's key
    result: list[_Result] | tuple[float, str]


class _Response(_Api):
    status: Literal["success", "error"]
    data: _Data | None = None
    errorType: str | None = None  # noqa: N815
    error: str | None = None
    warnings: list[str] = []


@dataclass(frozen=True)
class Series:
    """One result series: its labels and its (unix time, value) points; an instant query gives one point."""

    metric: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)


def parse_response(body: Any, query: str, status: int) -> tuple[list[Series], list[str]]:
    """The series of an API response and its warnings; PromQLError for an error answer. Pure.

    A scalar result is one series without labels. NaN samples are kept (PromQL yields them, e.g. a 0/0
    ratio); a caller that cannot use them drops them.
    """
    try:
        resp = _Response.model_validate(body)
    except ValidationError as exc:
        why = exc.errors()[0]["msg"]
        raise PrometheusUnreachable(f"not a Prometheus API answer (HTTP {status}) for {query!r}: {why}") from None
    if resp.status == "error" or resp.data is None:
        raise PromQLError(query, resp.errorType or "unknown", resp.error or "(no error text)", status)
    data = resp.data
    if data.resultType == "string":
        raise PromQLError(query, "unsupported", "a string result carries no samples", status)
    if isinstance(data.result, tuple):
        t, v = data.result
        return [Series(metric={}, points=[(t, float(v))])], resp.warnings
    out = []
    for r in data.result:
        raw = r.values if r.values is not None else ([r.value] if r.value is not None else [])
        out.append(Series(metric=dict(r.metric), points=[(t, float(v)) for t, v in raw]))
    return out, resp.warnings


class PrometheusApi:
    """``instant`` and ``range`` queries against one Prometheus; use as ``async with`` or call ``close``."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None
        self.warnings: list[str] = []

    def __repr__(self) -> str:  # never the token
        return f"PrometheusApi({self.url!r}, token={'set' if self._headers else 'none'})"

    async def __aenter__(self) -> PrometheusApi:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def instant(self, query: str, at: float | None = None) -> list[Series]:
        """``/api/v1/query``: the query's value at unix time ``at`` (Prometheus' now when None)."""
        params = {"query": query}
        if at is not None:
            params["time"] = repr(at)
        return await self._get("/api/v1/query", query, params)

    async def range(self, query: str, start: float, end: float, step_s: float) -> list[Series]:
        """``/api/v1/query_range``: the query at ``start``, ``start + step_s``, ... up to ``end`` (unix times)."""
        if not (math.isfinite(step_s) and step_s > 0) or end < start:
            raise ValueError(f"a range query needs start <= end and a step > 0 (got {start}, {end}, {step_s})")
        params = {"query": query, "start": repr(start), "end": repr(end), "step": repr(step_s)}
        return await self._get("/api/v1/query_range", query, params)

    async def _get(self, path: str, query: str, params: dict[str, str]) -> list[Series]:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers)
        try:
            async with asyncio.timeout(self.timeout_s):
                # POST with a form body, as Prometheus' API allows: long PromQL stays out of URLs and access logs.
                async with self._session.post(f"{self.url}{path}", data=params) as resp:
                    status = resp.status
                    try:
                        body = await resp.json(content_type=None)
                    except ValueError:
                        body = None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise PrometheusUnreachable(f"Prometheus at {self.url} did not answer: {type(exc).__name__}: {exc}") from None
        if body is None:
            hint = " (is the bearer token right?)" if status in (401, 403) else ""
            raise PrometheusUnreachable(f"Prometheus at {self.url} answered HTTP {status} without its API's JSON{hint}")
        series, warnings = parse_response(body, query, status)
        self.warnings.extend(warnings)
        return series
