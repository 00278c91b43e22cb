"""How fast the simulator runs: one hour of traffic at 10 requests/s, a 70B target on 4 x H100, two arms.

Run: PYTHONPATH=src .venv/bin/python bench/sim_speed.py [--core N] [--duration S] [--rate R]

Pinned to one core. The workload: Llama-3-70B, TP 4 on h100-80gb, Poisson arrivals, prompts of 512 and
outputs of 256 tokens; the baseline, and draft-model speculation (qwen2.5-0.5b, k = 4, acceptance
0.8,0.6,0.45,0.3). Prints simulated requests and steps per wall second per arm and the total wall time
against the issue's 10 s target.

Measured 2026-12-02 on this machine (2 shared vCPUs, another process busy at times), one hour at 10 req/s:
baseline 136,664 steps in 3.6 s (38,000 steps/s, 10,000 requests/s), draft_model 84,250 steps in 4.3 s
(19,800 steps/s, 8,500 requests/s): 7.9 s for both arms. Vidur, the issue's competitor, is not run by
this script yet: it is not side by side, so it states no ratio.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from specguard.sim.run import SimRequest, build_arms
from specguard.sim.simulate import simulate_arm
from specguard.sim.workload import Lengths, arrival_times, draw_lengths

TARGET_S = 10.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--rate", type=float, default=10.0)
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.core})
    req = SimRequest(
        target="llama-3-70b",
        gpu="h100-80gb",
        tensor_parallel_size=4,
        rates=[args.rate],
        prompt_len=512,
        output_len=256,
        method="draft_model",
        draft="qwen2.5-0.5b",
        num_speculative_tokens=4,
        acceptance=[0.8, 0.6, 0.45, 0.3],
        duration_s=args.duration,
    )
    arms = build_arms(req)
    rng = np.random.default_rng(req.seed)
    arrivals = arrival_times(req.arrivals, args.rate, args.duration, rng)
    prompts, outputs = draw_lengths(Lengths.fixed(req.prompt_len, req.output_len), len(arrivals), rng)
    total = 0.0
    print(f"{len(arrivals)} requests over {args.duration:g} simulated s at {args.rate:g} req/s, one core ({args.core})")
    print(f"{'arm':<12} {'wall s':>8} {'steps':>9} {'steps/s':>9} {'requests/s':>11}")
    for name, speculative in (("baseline", False), ("speculative", True)):
        config, step = arms.engine_config(req, speculative), arms.step
        t = time.perf_counter()
        m = simulate_arm(config, step, arrivals, prompts, outputs, args.duration / 10, req.seed)
        wall = time.perf_counter() - t
        total += wall
        print(f"{name:<12} {wall:>8.2f} {m.steps:>9} {m.steps / wall:>9.0f} {len(arrivals) / wall:>11.0f}")
    verdict = "within" if total <= TARGET_S else "OVER"
    print(f"both arms: {total:.2f} s wall ({verdict} the {TARGET_S:g} s target)")


if __name__ == "__main__":
    main()
