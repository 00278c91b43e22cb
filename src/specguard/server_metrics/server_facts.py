"""What a running vLLM says about itself: /version, /v1/models and /metrics, read once.

Shared by bench (is the model served?), preflight (is speculation really on?),
plan (predicted against actual KV blocks) and inventory (what was deployed).
The API key is sent, never stored or printed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from specguard.server_metrics.parse import MetricsParseError, has_spec_decode, parse_metrics_text
from specguard.vllm.urls import server_root


class ServerFacts(BaseModel):
    url: str
    reachable: bool
    version: str | None = None
    models: list[dict[str, Any]] = Field(default_factory=list, description="id, root, max_model_len per served model")
    metrics_ok: bool = False
    spec_decode_counters: list[str] = Field(default_factory=list, description="spec-decode metric names exposed")
    speculation_on: bool | None = Field(default=None, description="spec-decode counters exist only with speculation")
    cache_config: dict[str, str] | None = None
    kv_cache_usage: float | None = None
    errors: list[str] = Field(default_factory=list)
    # Whether /v1/models answered: "serves none" and "did not say" differ, and the record keeps only the list.
    _models_read: bool = PrivateAttr(default=False)

    @property
    def served_names(self) -> list[str] | None:
        """The served model ids, or None where /v1/models did not answer."""
        return [str(m.get("id")) for m in self.models] if self._models_read else None

    @property
    def num_gpu_blocks(self) -> int | None:
        value = (self.cache_config or {}).get("num_gpu_blocks")
        return int(value) if value not in (None, "", "None") else None

    @property
    def block_size(self) -> int | None:
        value = (self.cache_config or {}).get("block_size")
        return int(value) if value not in (None, "", "None") else None


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The one place an API key becomes a header (and is never logged)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _get(url: str, api_key: str | None, timeout_s: float) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=auth_headers(api_key))
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def inspect_server(url: str, api_key: str | None = None, timeout_s: float = 10.0, *, read_metrics: bool = True) -> ServerFacts:
    """/version, /v1/models and (with ``read_metrics``) /metrics; what could not be read is in ``errors``."""
    root = server_root(url)
    facts = ServerFacts(url=root, reachable=False)
    errors: list[str] = []
    try:
        status, body = _get(f"{root}/version", api_key, timeout_s)
        facts.reachable = True
        if status == 200:
            facts.version = str(json.loads(body).get("version"))
        else:
            errors.append(f"/version: HTTP {status}")
        status, body = _get(f"{root}/v1/models", api_key, timeout_s)
        if status == 200:
            data = json.loads(body).get("data", [])
            facts.models = [{k: m.get(k) for k in ("id", "root", "max_model_len")} for m in data if isinstance(m, dict)]
            facts._models_read = True
        else:
            errors.append(f"/v1/models: HTTP {status}" + (" (pass --api-key-env)" if status == 401 else ""))
        if read_metrics:
            _read_metrics(facts, root, api_key, timeout_s, errors)
    except (urllib.error.URLError, OSError, TimeoutError, ValueError, AttributeError, MetricsParseError) as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    facts.errors = errors
    return facts


def _read_metrics(facts: ServerFacts, root: str, api_key: str | None, timeout_s: float, errors: list[str]) -> None:
    status, body = _get(f"{root}/metrics", api_key, timeout_s)
    if status != 200:
        errors.append(f"/metrics: HTTP {status}")
        return
    sample = parse_metrics_text(body, time.monotonic(), "before")
    facts.metrics_ok = True
    facts.spec_decode_counters = sorted(v for k, v in sample.names_seen.items() if k.startswith("spec_"))
    facts.speculation_on = has_spec_decode(sample)
    facts.cache_config = sample.cache_config
    facts.kv_cache_usage = sample.gauges.get("kv_cache_usage")
