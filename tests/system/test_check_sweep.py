"""A sweep finds a crossover planted between two known rates: the scripted candidate is twice as fast per token
while requests arrive at no more than KNEE requests/s, and four times slower above it (the server judges the rate by
its own arrivals, so the knee is exact whatever the latencies). The sweep's bracket must contain the knee."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import no_traceback

KNEE = 9.0

PLAN = """
name: sweep-check
arms:
  baseline: {{endpoint: {{base_url: "{base}", model: scripted}}}}
  candidate: {{endpoint: {{base_url: "{cand}", model: scripted}}}}
repetitions: 1
warmup: 2
max_tokens: 6
traffic:
  sweep: {{num_requests: 12, max_concurrency: 4, rates: 3, arrival: constant, bisect_steps: 2}}
sampling:
  - {{name: greedy, temperature: 0.0}}
prompts:
  - {{source: "synthetic:random", count: 8}}
objective: {{metric: itl_ms, percentile: p50, min_improvement: 0.2}}
statistics: {{resamples: 200}}
"""


def test_sweep_brackets_a_planted_crossover_and_resume_reruns_nothing(scripted, tmp_path):
    base = scripted(ttft_ms=60, interval_ms=50, chunks=6, tokens_pattern=[1])
    cand = scripted(ttft_ms=60, interval_ms=50, chunks=3, tokens_pattern=[2], knee_rps=KNEE, knee_slowdown=4.0)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(base=base.base_url, cand=cand.base_url))
    out = tmp_path / "check"
    cmd = [sys.executable, "-m", "specguard", "check", str(plan), "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert no_traceback(r.stdout, r.stderr), r.stderr
    assert (out / "verdict.json").exists(), r.stdout[-3000:] + r.stderr[-3000:]

    sweep = json.loads((out / "check.json").read_text())["sweep"]
    assert sweep["finished"] and [s["name"] for s in sweep["stages"]] == ["probe", "rates", "bisect-1", "bisect-2"]
    assert all(s["reason"] for s in sweep["stages"])  # why each stage's rates were chosen
    levels = {lv["name"]: lv for s in sweep["stages"] for lv in s["levels"]}
    assert levels["sync"]["load_rps"] < levels["rate-1"]["rate"] < levels["rate-3"]["rate"] < levels["saturate"]["load_rps"]

    v = json.loads((out / "verdict.json").read_text())
    crossing = [c for c in v["crossover"] if c.startswith("greedy /")]
    assert crossing, v["crossover"]
    # the bracket from the cells: last paid and first not paid, by offered load (requests/s)
    by_load = sorted((c["offered_load"], c["traffic"]) for c in v["cells"])
    status = {x["traffic"]: x["status"] for x in v["lines"]}
    lo = max(load for load, t in by_load if status[t] == "better" and load < KNEE * 1.05)
    hi = min(load for load, t in by_load if load > lo and status[t] != "better")
    assert lo <= KNEE * 1.05 and hi >= KNEE * 0.95, (lo, hi, by_load, status)
    assert f"between offered load {lo:g} and {hi:g}" in " ".join(crossing)
    # two bisections of a bracket one rate step wide leave a quarter of it
    step = levels["rate-2"]["rate"] - levels["rate-1"]["rate"]
    assert hi - lo <= step / 4 + 1e-9

    # a finished sweep resumed measures nothing again
    again = subprocess.run(
        [sys.executable, "-m", "specguard", "check", str(plan), "--out", str(out), "--resume"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert no_traceback(again.stdout, again.stderr), again.stderr
    assert "block:" not in again.stdout and "block:" not in again.stderr
