"""``specguard check`` on a plan of ``sim:`` arms: two simulated servers started by the check itself, a verdict in
seconds, and every output labelled simulated (verdict.json, report.md, report.html, each run's summary)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from specguard.results.check_dir import CheckDir
from specguard.results.models import RunInfo, Summary
from specguard.results.run_dir import RunDir
from specguard.results.store import read_json
from specguard.simulated import SIMULATED_SERVER_BANNER, is_simulated_version

ROOT = Path(__file__).resolve().parents[2]
# An 8B model on one H100 with n-gram speculation at high acceptance: both arms far from any limit, 20 requests each.
PLAN = """
name: sim-check
arms:
  baseline:
    launch: {model: "sim:llama-3.1-8b", extra_args: [--gpu, h100-80gb, --max-num-seqs, "8"]}
  candidate:
    launch:
      model: "sim:llama-3.1-8b"
      extra_args: [--gpu, h100-80gb, --max-num-seqs, "8", --acceptance, "0.8,0.6,0.4"]
      speculative_config: {method: ngram, num_speculative_tokens: 3}
repetitions: 1
warmup: 0
max_tokens: 32
traffic:
  - {name: low, rate: 4, num_requests: 20, target: true}
sampling:
  - {name: greedy, temperature: 0.0}
prompts:
  - {source: "synthetic:random", count: 8}
objective: {metric: tpot_ms, percentile: p50, min_improvement: 0.10}
statistics: {resamples: 200}
"""


def test_a_check_on_sim_arms_runs_and_says_simulated_everywhere(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out = tmp_path / "check"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, "-m", "specguard", "check", str(plan), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode in (0, 1, 3), r.stderr[-3000:]
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["simulated"] is True and verdict["exit_code"] == r.returncode
    assert SIMULATED_SERVER_BANNER in (out / "report.md").read_text()
    assert 'id="simulated"' in (out / "report.html").read_text()
    assert SIMULATED_SERVER_BANNER in r.stdout  # the terminal verdict too
    # the simulated server's speculation shows: n-gram at these acceptance rates is much faster per token
    (line,) = verdict["lines"]
    assert line["status"] == "better", line
    d = CheckDir(out)
    runs = d.arm_runs("baseline") + d.arm_runs("candidate")
    assert len(runs) == 2
    for run in runs:
        assert is_simulated_version(read_json(run / RunDir.RUN, RunInfo).server_version)
        assert read_json(run / "summary.json", Summary).notes[0] == SIMULATED_SERVER_BANNER
    assert verdict["inventory"]["candidate"]["speculative_config"]["method"] == "ngram"
