"""How far bench's TTFT and chunk stamps are from the scripted server's own write times (not a test).

The scripted server logs the CLOCK_MONOTONIC time at which it handed each chunk to the kernel (``ChunkLog``);
the client's stamp of the same chunk is ``run.json started_monotonic + sent_s + chunk_times_s[i]``. The first
chunk's error is the TTFT error; the others' the chunk-gap error. Usage:

    PYTHONPATH=src python bench/ttft_error.py [--rate 25] [--requests 250] [--runs 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.results.models import LoadShape
from specguard.results.run_dir import load_run
from specguard.scripted.process import ScriptedProcess
from specguard.scripted.server import Script


def one_run(rate: float, requests: int, root: Path) -> tuple[float, float]:
    with ScriptedProcess(Script(ttft_ms=50, interval_ms=20, chunks=16, tokens_pattern=[1]), root / "server") as server:
        out = root / "run"
        cfg = BenchConfig(
            base_url=server.base_url,
            model="scripted",
            prompts=synthetic_prompts("random", count=16),
            load=LoadShape(kind="poisson", rate=rate, num_requests=requests),
            metrics_url=None,
            gpu_metrics_url="none",
            out_dir=out,
        )
        run_async(run_bench(cfg))
        info, records, _ = load_run(out)
        truth = server.chunk_logs()
    first, rest = [], []
    for r in records:
        sent = info.started_monotonic + r.sent_s
        errs = [sent + t - w for t, w in zip(r.chunk_times_s, truth[r.request_id].chunk_sent, strict=False)]
        first.append(errs[0])
        rest.extend(errs[1:])
    return float(np.percentile(first, 99) * 1000), float(np.percentile(rest, 99) * 1000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=25.0)
    ap.add_argument("--requests", type=int, default=250)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    for i in range(a.runs):
        with tempfile.TemporaryDirectory() as tmp:
            ttft, gap = one_run(a.rate, a.requests, Path(tmp))
        print(f"run {i + 1}: TTFT error p99 {ttft:.2f} ms, chunk error p99 {gap:.2f} ms")


if __name__ == "__main__":
    main()
