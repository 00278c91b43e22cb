"""No vLLM server outlives a check or the demo, whatever ends it; `assess` stops on a signal like the others.

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
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", "check", str(plan), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
        start_new_session=True,
    )
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


def _serve(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / "serve.out"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specguard", "embedded", "serve", "--method", "baseline"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=sigint_default,
        )
    return proc, log


def test_ctrl_c_of_serve_and_sigkill_of_a_check_leave_no_vllm_server_behind(runtime, models, tmp_path):
    """Side by side, so that one server start's wait serves both (as two tests, 125 s and 61 s in CI):
    ``specguard embedded serve`` gets SIGINT at its own PID only (``kill -INT``), and stops its server cleanly
    with the table's exit code and no traceback; a check with launched arms is killed with SIGKILL in its
    first block, and PR_SET_PDEATHSIG takes its server and helpers down with it."""
    serve, serve_log = _serve(tmp_path)
    check, out = start_check(tmp_path)
    try:
        check_procs = wait_measuring(check, out)
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and "ready:" not in serve_log.read_text():
            assert serve.poll() is None, serve_log.read_text()
            time.sleep(1)
        assert "ready:" in serve_log.read_text()
        serve_procs = descendants(serve.pid)
        assert len(check_procs) >= 4, "the vLLM API server, its engine core, the record writer and the scraper"
        assert len(serve_procs) >= 2, "the vLLM API server and its engine core"
        serve.send_signal(signal.SIGINT)
        os.kill(check.pid, signal.SIGKILL)
        check.communicate(timeout=30)
        serve.wait(timeout=60)
        assert not wait_gone(check_procs, 90), "every process of the check ends with its parent"
        assert not wait_gone(serve_procs, 60), "server left running after Ctrl-C"
        assert serve.returncode == 130 and "interrupted" in serve_log.read_text(), "Ctrl-C: the table's exit code"
        assert "Traceback" not in serve_log.read_text()
    finally:
        for p in (serve, check):
            if p.poll() is None:
                p.kill()


def test_ctrl_c_to_the_group_stops_the_demo_cleanly_and_says_how_to_resume(runtime, models, tmp_path):
    """A terminal's Ctrl-C (SIGINT to the whole group) during the demo's first block, its server running."""
    out = tmp_path / "demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", "demo", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
        start_new_session=True,
    )
    run_dir = out / "runs" / "baseline" / "rep1" / "idle__greedy__p0"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (
        (run_dir / "requests.jsonl").exists() and (run_dir / "requests.jsonl").read_text().count("\n") >= 2
    ):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.5)
    procs = descendants(proc.pid)
    assert len(procs) >= 4, "the vLLM API server, its engine core, the record writer and the scraper"
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert no_traceback(stdout, stderr) and "demo.yaml" in stderr and "--resume" in stderr
    assert not (out / "verdict.json").exists(), "no verdict from a truncated matrix"
    state = json.loads((out / "check-state.json").read_text())
    assert state["done"] == [] and state["blocks"][0] == "baseline rep1"
    assert json.loads((run_dir / "run.json").read_text())["interrupted"] is True
    assert not wait_gone(procs, 60), "the server is stopped and the helpers end"


def test_assess_interrupted_exits_130_without_a_traceback(models, tmp_path):
    """SIGINT or SIGTERM, to assess or its group, end it at once; nothing it wrote is left half a line."""
    log = tmp_path / "big.jsonl"
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    with log.open("w") as fh:
        for i in range(40_000):
            text = " ".join(words[(i + j) % 10] for j in range(60))
            fh.write(
                json.dumps(
                    {
                        "schema_version": "specguard.request_log/1",
                        "endpoint": "completions",
                        "prompt": text,
                        "response": {"text": text[: 120 + i % 50]},
                    }
                )
                + "\n"
            )
    for sig, to_group in ((signal.SIGINT, True), (signal.SIGTERM, False)):
        per_request = tmp_path / f"requests-{sig.name}.jsonl"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specguard",
                "assess",
                str(log),
                "--tokenizer",
                str(models.tokenizer),
                "--requests-out",
                str(per_request),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_default,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (per_request.exists() and per_request.stat().st_size > 10_000):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        (os.killpg if to_group else os.kill)(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr[-2000:]
        assert "interrupted" in stderr and no_traceback(stdout, stderr)
        lines = per_request.read_text().splitlines()
        assert lines and all(json.loads(x)["request"] == n for n, x in enumerate(lines))
