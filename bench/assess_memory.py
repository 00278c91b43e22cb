"""Peak memory of ``specguard assess`` on a small and a large request log: it should stay flat.

Writes two logs in specguard's format with the same kind of request (prompt and
response token ids, timestamps, durations, two segments), sized --small-mb and
--large-mb, runs ``specguard assess --no-sweep --no-suffix --json`` on each in a
child process, and prints each run's peak resident memory (from wait4) and
the ratio. The log streams: what grows with the log is a few bytes of
profile per request, not the requests.

Not a test: the figures depend on the machine. Usage:
    .venv/bin/python bench/assess_memory.py [--small-mb 100] [--large-mb 1024] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from specguard.embedded.models import ensure_models
from specguard.embedded.runtime import ensure_runtime


def write_log(path: Path, megabytes: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    target = megabytes * 1024 * 1024
    written = n = 0
    with path.open("w") as fh:
        while written < target:
            prompt = [rng.randrange(2048) for _ in range(rng.randint(200, 800))]
            if n % 2:
                output = [rng.randrange(2048) for _ in range(128)]
            else:
                start = rng.randrange(len(prompt) - 20)
                output = (prompt[start : start + 16] * 8)[:128]
            line = (
                json.dumps(
                    {
                        "schema_version": "specguard.request_log/1",
                        "timestamp": 1764400000 + n * 0.05,
                        "endpoint": "completions",
                        "prompt_token_ids": prompt,
                        "segment": f"s{n % 2}",
                        "sampling": {"temperature": 0},
                        "response": {"token_ids": output},
                        "timings": {"e2e_s": 1.0},
                    }
                )
                + "\n"
            )
            fh.write(line)
            written += len(line)
            n += 1
    return n


def peak_rss_mb(argv: list[str]) -> tuple[float, float]:
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small-mb", type=int, default=100)
    ap.add_argument("--large-mb", type=int, default=1024)
    ap.add_argument("--dir", type=Path, default=Path("/tmp"))
    args = ap.parse_args()
    tokenizer = ensure_models(ensure_runtime()).path("tokenizer")
    results = []
    for mb in (args.small_mb, args.large_mb):
        log = args.dir / f"specguard-assess-{mb}mb.jsonl"
        requests = write_log(log, mb)
        rss, seconds = peak_rss_mb(
            [
                sys.executable,
                "-m",
                "specguard",
                "assess",
                str(log),
                "--tokenizer",
                str(tokenizer),
                "--no-sweep",
                "--no-suffix",
                "--json",
            ]
        )
        results.append((mb, requests, rss, seconds))
        log.unlink()
        print(f"{mb:5d} MB log, {requests:7d} requests: peak RSS {rss:7.1f} MB, {seconds:6.1f} s")
    (small_mb, _, small, _), (large_mb, _, large, _) = results
    print(f"log {large_mb / small_mb:.1f}x larger, peak memory {large / small:.2f}x")


if __name__ == "__main__":
    main()
