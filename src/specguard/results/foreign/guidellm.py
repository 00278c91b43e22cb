"""GuideLLM ``benchmarks.json`` files as specguard runs, one benchmark (one load level) at a time. Pure.

The format is GuideLLM's ``GenerativeBenchmarksReport`` (``src/guidellm/benchmark/objects.py`` and
``schemas/``, v0.2 to v0.4): ``benchmarks[]``, each with ``requests.successful``, ``.errored`` and
``.incomplete`` lists of request stats whose computed fields are serialized: ``time_to_first_token_ms``,
``inter_token_latency_ms``, ``request_latency`` (s), ``output_tokens``, ``prompt_tokens``; the load as a
strategy (``type_`` synchronous, concurrent with ``streams``, throughput, constant or poisson with ``rate``)
under ``scheduler.strategy`` (v0.3+), ``args.strategy`` (v0.2) or ``config.strategy``.

Definitions, mapped: GuideLLM's TTFT is specguard's TTFT. Its per-request ``inter_token_latency_ms`` is
(last token - first token) / (output tokens - 1), which is specguard's TPOT, so specguard's E2E is
TTFT + that x (output tokens - 1). GuideLLM keeps no chunk times, so there is no per-token ITL distribution:
``itl_ms`` is empty for these runs, and the run carries a warning saying so (compare ``tpot_ms`` instead).
GuideLLM's own ``time_per_output_token_ms`` includes the TTFT and is not used.
"""

from __future__ import annotations

from typing import Any

from specguard.errors import InputFileError
from specguard.results.foreign.run import LoadedRun
from specguard.results.models import LoadShape, RequestRecord, RunInfo, SamplingOverrides

__all__ = ["parse_guidellm", "guidellm_load"]

_STRATEGY_PATHS = (("scheduler", "strategy"), ("args", "strategy"), ("config", "strategy"))
_MODEL_PATHS = (
    ("benchmarker", "backend", "model"),
    ("worker", "backend_model"),
    ("config", "backend", "model"),
    ("benchmarker", "requests", "model"),
)


def parse_guidellm(data: dict[str, Any], name: str, index: int | None) -> LoadedRun:
    """Benchmark ``index`` of a GuideLLM report (the only one when ``index`` is None)."""
    benches = data.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise InputFileError(f"{name}: key 'benchmarks': no benchmark in the file")
    if index is None and len(benches) > 1:
        kinds = ", ".join(f"#{i} {_strategy_text(b)}" for i, b in enumerate(benches))
        raise InputFileError(f"{name}: {len(benches)} benchmarks ({kinds}); name one as {name}#N")
    i = index or 0
    if i >= len(benches):
        raise InputFileError(f"{name}: key 'benchmarks': #{i} asked, the file holds {len(benches)}")
    bench = benches[i]
    if not isinstance(bench, dict) or not isinstance(bench.get("requests"), dict):
        raise InputFileError(f"{name}: key 'benchmarks[{i}].requests': missing (not a GuideLLM generative benchmark)")
    groups = bench["requests"]
    records: list[RequestRecord] = []
    for status in ("successful", "errored", "incomplete"):
        items = groups.get(status) or []
        if not isinstance(items, list):
            raise InputFileError(f"{name}: key 'benchmarks[{i}].requests.{status}': expected a list")
        for j, item in enumerate(items):
            if not isinstance(item, dict):
                raise InputFileError(f"{name}: key 'benchmarks[{i}].requests.{status}[{j}]': expected an object")
            records.append(_record(item, len(records), status))
    first: dict[str, Any] = next(iter(groups.get("successful") or []), {})
    load = guidellm_load(bench, len(records))
    info = RunInfo(
        tool_version="guidellm",
        base_url=f"file:{name}",
        api="chat" if first.get("request_type") == "chat_completions" else "completions",
        model=_model(bench),
        metrics_url=None,
        prompt_source=f"guidellm:{name}",
        prompt_count=len(records),
        load=load,
        sampling=SamplingOverrides(),
        started_unix=float(bench.get("start_time") or 0.0),
        started_monotonic=0.0,
    )
    warnings = [
        f"{name}: a GuideLLM benchmark ({_strategy_text(bench)}): prompt content and sampling are not verified",
        f"{name}: GuideLLM keeps no chunk times, so itl_ms (per token) is not available; its per-request "
        "inter_token_latency_ms is specguard's tpot_ms, compared exactly",
    ]
    return LoadedRun(name, "guidellm", info, records, warnings)


def guidellm_load(bench: dict[str, Any], n: int) -> LoadShape:
    """specguard's load shape for a GuideLLM strategy (throughput, all requests at once, reads as a burst)."""
    strategy = _strategy(bench)
    kind = str(strategy.get("type_", ""))
    rate = strategy.get("rate")
    if kind == "synchronous":
        return LoadShape(kind="idle", num_requests=n)
    if kind == "concurrent" and isinstance(strategy.get("streams"), int):
        return LoadShape(kind="concurrency", concurrency=strategy["streams"], num_requests=n)
    if kind in ("constant", "async_constant") and isinstance(rate, (int, float)):
        return LoadShape(kind="constant", rate=float(rate), num_requests=n)
    if kind in ("poisson", "async_poisson") and isinstance(rate, (int, float)):
        return LoadShape(kind="poisson", rate=float(rate), num_requests=n)
    return LoadShape(kind="burst", burst=max(n, 1), num_requests=n)


def _record(item: dict[str, Any], seq: int, status: str) -> RequestRecord:
    ttft_ms = item.get("time_to_first_token_ms")
    itl_ms = item.get("inter_token_latency_ms")
    out = item.get("output_tokens")
    ok = status == "successful" and isinstance(ttft_ms, (int, float))
    ttft = float(ttft_ms) / 1000 if ok and isinstance(ttft_ms, (int, float)) else None
    e2e = None
    if ttft is not None:
        steps = (out - 1) if isinstance(out, int) and out > 1 else 0
        e2e = ttft + (float(itl_ms) * steps / 1000 if isinstance(itl_ms, (int, float)) else 0.0)
    latency = item.get("request_latency")
    error = None if ok else str(item.get("error") or ("incomplete at the benchmark's end" if status == "incomplete" else status))
    return RequestRecord(
        index=seq,
        seq=seq,
        request_id=str(item.get("request_id") or f"guidellm-{seq}"),
        segment="default",
        ok=ok,
        error=error,
        http_status=None,
        scheduled_s=0.0,
        sent_s=0.0,
        send_lag_s=0.0,
        ttft_s=ttft,
        e2e_s=e2e,
        stream_end_s=float(latency) if isinstance(latency, (int, float)) else e2e,
        chunk_times_s=[],
        chunk_tokens=[],
        token_source=None,
        prompt_tokens=item.get("prompt_tokens") if isinstance(item.get("prompt_tokens"), int) else None,
        output_tokens=out if isinstance(out, int) and ok else None,
        finish_reason=None,
    )


def _dig(data: dict[str, Any], path: tuple[str, ...]) -> object:
    cur: object = data
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def _strategy(bench: dict[str, Any]) -> dict[str, Any]:
    for path in _STRATEGY_PATHS:
        found = _dig(bench, path)
        if isinstance(found, dict):
            return found
    return {}


def _strategy_text(bench: object) -> str:
    s = _strategy(bench) if isinstance(bench, dict) else {}
    extra = s.get("rate", s.get("streams"))
    return f"{s.get('type_', 'unknown')}{'' if extra is None else f' {extra}'}"


def _model(bench: dict[str, Any]) -> str:
    for path in _MODEL_PATHS:
        found = _dig(bench, path)
        if isinstance(found, str) and found:
            return found
    return "unknown"
