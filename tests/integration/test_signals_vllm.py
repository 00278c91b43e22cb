"""No vLLM server outlives a check, whatever ends it: SIGKILL of the parent, or Ctrl-C to the whole group.

A check with launched arms starts a real embedded vLLM server (its API server and engine
core) for every block. Each test runs the check in a session of its own, waits until the
first block is measuring, notes every process below specguard, and ends it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import descendants, no_traceback, sigint_default, wait_gone

pytestmark = pytest.mark.vllm

PLAN = """
name: signals
arms:
  baseline: {launch: {model: "embedded:target", max_model_len: 512}}
  candidate:
    launch:
      model: "embedded:target"
      max_model_len: 512
      speculative_config: {method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 2, prompt_lookup_max: 4}
repetitions: 1
warmup: 0
max_tokens: 16
traffic:
  - {name: idle, num_requests: 400, target: true}
sampling:
  - {name: greedy, temperature: 0.0}
prompts:
  - {source: "synthetic:mixed", count: 8}
"""


def start_check(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out = tmp_path / "check"
    proc = subprocess.Popen([sys.executable, "-m", "specguard", "check", str(plan), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default,
                            start_new_session=True)
    return proc, out


def wait_measuring(proc: subprocess.Popen[str], out: Path, timeout_s: float = 600) -> set[int]:
    """Every process below the check once its first block has recorded requests (vLLM and specguard's helpers)."""
    records = out / "runs" / "baseline" / "rep1" / "idle__greedy__p0" / "requests.jsonl"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if records.exists() and len(records.read_text().splitlines()) >= 3:
            return descendants(proc.pid)
        time.sleep(0.5)
    raise AssertionError("the first block never started measuring")


def test_sigkill_of_a_check_leaves_no_vllm_server_behind(runtime, models, tmp_path):
    proc, out = start_check(tmp_path)
    procs = wait_measuring(proc, out)
    assert len(procs) >= 4, "the vLLM API server, its engine core, the record writer and the scraper"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert not wait_gone(procs, 90), "every process of the run ends with its parent"


def test_ctrl_c_to_the_group_stops_a_check_cleanly(runtime, models, tmp_path):
    proc, out = start_check(tmp_path)
    procs = wait_measuring(proc, out)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "--resume" in stderr and no_traceback(stdout, stderr)
    assert not (out / "verdict.json").exists()
    state = json.loads((out / "check-state.json").read_text())
    assert state["done"] == [] and state["blocks"] == ["baseline rep1", "candidate rep1"]
    run = json.loads((out / "runs" / "baseline" / "rep1" / "idle__greedy__p0" / "run.json").read_text())
    assert run["interrupted"] is True
    assert not wait_gone(procs, 60), "the server is stopped and the helpers end"
