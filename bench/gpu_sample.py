"""Sample this machine's GPUs through NVML for a few seconds and print the values (not part of CI).

Shows on a machine with an NVIDIA GPU what a run records in gpu_metrics.jsonl, through the same
sampler the scraper child uses. On a machine without one it prints NVML's reason and exits 0.

    python bench/gpu_sample.py [SECONDS] [INTERVAL]
"""

from __future__ import annotations

import sys
import time

from specguard.analysis.gpu_usage import gpu_usage
from specguard.server_metrics.gpu import NvmlSampler


def _f(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def main(seconds: float = 3.0, interval: float = 0.5) -> int:
    sampler = NvmlSampler()
    if sampler.unavailable is not None:
        print(sampler.unavailable)
        return 0
    t0 = time.monotonic()
    samples = []
    try:
        while time.monotonic() - t0 < seconds:
            sample = sampler.read(t0, "during")
            samples.append(sample)
            for g in sample.gpus:
                print(
                    f"t={sample.t_s:5.2f}s gpu {g.gpu} {g.name} util {_f(g.utilization_pct)} % "
                    f"mem {_f(g.memory_used_mib)}/{_f(g.memory_total_mib)} MiB "
                    f"sm {_f(g.sm_clock_mhz)} MHz power {_f(g.power_w)} W"
                )
            time.sleep(interval)
    finally:
        sampler.close()
    usage = gpu_usage(samples)
    print(usage.model_dump_json(indent=2) if usage is not None else "no samples")
    return 0


if __name__ == "__main__":
    sys.exit(main(*(float(a) for a in sys.argv[1:3])))
