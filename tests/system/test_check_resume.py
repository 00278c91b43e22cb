"""A check interrupted and resumed decides as an uninterrupted one; an incomplete check gives no verdict.

The arms are two scripted servers with fixed timing (the candidate streams two tokens
per chunk at half the baseline's gap), so the verdict depends on the plan, not on noise.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import no_traceback, sigint_default

PLAN = """
name: resume-check
arms:
  baseline: {{endpoint: {{base_url: "{base}", model: scripted}}}}
  candidate: {{endpoint: {{base_url: "{cand}", model: scripted}}}}
repetitions: 2
warmup: 0
max_tokens: 8
traffic:
  - {{name: steady, concurrency: 2, num_requests: {n}, target: true}}
sampling:
  - {{name: greedy, temperature: 0.0}}
prompts:
  - {{source: "synthetic:random", count: 8}}
objective: {{metric: itl_ms, percentile: p50, min_improvement: 0.2}}
statistics: {{resamples: 200}}
"""


def specguard(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "specguard", *args], capture_output=True, text=True, timeout=timeout)
    assert no_traceback(r.stdout, r.stderr), r.stderr
    return r


def write_plan(tmp_path: Path, base, cand, n: int = 24, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(PLAN.format(base=base.base_url, cand=cand.base_url, n=n))
    return path


def decision(out: Path) -> tuple[str, int, list[tuple[str, str, str, str]]]:
    v = json.loads((out / "verdict.json").read_text())
    return v["verdict"], v["exit_code"], [(x["traffic"], x["sampling"], x["segment"], x["status"]) for x in v["lines"]]


def test_interrupted_check_resumes_to_the_same_verdict(scripted, tmp_path):
    base = scripted(ttft_ms=10, interval_ms=30, chunks=8, tokens_pattern=[1])
    cand = scripted(ttft_ms=10, interval_ms=15, chunks=4, tokens_pattern=[2])
    plan = write_plan(tmp_path, base, cand)

    whole = tmp_path / "whole"
    r = specguard("check", str(plan), "--out", str(whole))
    assert r.returncode in (0, 1, 3), r.stderr
    expected = decision(whole)
    assert r.returncode == expected[1]

    cut = tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", "check", str(plan), "--out", str(cut)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    state_path = cut / "check-state.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if state_path.exists() and len(json.loads(state_path.read_text())["done"]) >= 1:
            break
        time.sleep(0.05)
    time.sleep(0.6)  # into the second block
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "--resume" in stderr and no_traceback(stdout, stderr)
    state = json.loads(state_path.read_text())
    assert 1 <= len(state["done"]) < len(state["blocks"])
    assert not (cut / "verdict.json").exists(), "no verdict from a truncated matrix"

    # an incomplete check: no verdict without --partial, a labelled partial report with it
    r = specguard("report", str(cut))
    assert r.returncode == 2 and "incomplete" in r.stderr and "--resume" in r.stderr
    r = specguard("report", str(cut), "--partial")
    assert r.returncode == 3, r.stderr
    partial = (cut / "report-partial.md").read_text()
    assert partial.startswith("# PARTIAL REPORT, NO VERDICT") and "block " in partial.splitlines()[0]
    assert "PARTIAL REPORT, NO VERDICT" in (cut / "report-partial.html").read_text()
    assert not (cut / "verdict.json").exists()

    # the same --out without --resume is refused; a changed plan is refused on resume
    r = specguard("check", str(plan), "--out", str(cut))
    assert r.returncode == 2 and "--resume" in r.stderr
    changed = write_plan(tmp_path, base, cand, n=26, name="changed.yaml")
    r = specguard("check", str(changed), "--out", str(cut), "--resume")
    assert r.returncode == 2 and "changed" in r.stderr

    r = specguard("check", str(plan), "--out", str(cut), "--resume")
    assert r.returncode == expected[1], r.stderr
    assert "resuming" in r.stderr
    assert decision(cut) == expected
    kept = list((cut / "interrupted").glob("*/*/rep*"))
    assert kept, "the interrupted block's partial runs are set aside, not reused or deleted"

    # report refuses to overwrite the check's outputs unless --force, and exits with the verdict's code
    r = specguard("report", str(cut))
    assert r.returncode == 2 and "--force" in r.stderr
    r = specguard("report", str(cut), "--force")
    assert r.returncode == expected[1] and decision(cut) == expected


def test_a_plan_is_resolved_before_anything_runs(scripted, tmp_path, monkeypatch):
    """Prompt sources, synthetic set names and API-key variables fail the check before the baseline is measured."""
    base = scripted(ttft_ms=5, interval_ms=5, chunks=4)
    cand = scripted(ttft_ms=5, interval_ms=5, chunks=4)
    text = PLAN.format(base=base.base_url, cand=cand.base_url, n=4)
    cases = {
        "key": (
            text.replace("model: scripted}}\n  candidate", "model: scripted, api_key_env: SG_UNSET_KEY}}\n  candidate").replace(
                "model: scripted}}\nrep", "model: scripted, api_key_env: SG_UNSET_KEY}}\nrep"
            ),
            "SG_UNSET_KEY",
        ),
        "synthetic": (text.replace("synthetic:random", "synthetic:nonsense"), "unknown synthetic prompt set"),
        "file": (
            text.replace('"synthetic:random", count: 8}', '"synthetic:random", count: 8}\n  - {source: missing.jsonl}'),
            "prompt file not found",
        ),
    }
    monkeypatch.delenv("SG_UNSET_KEY", raising=False)
    for name, (plan_text, fragment) in cases.items():
        plan = tmp_path / f"{name}.yaml"
        plan.write_text(plan_text)
        out = tmp_path / f"out-{name}"
        r = specguard("check", str(plan), "--out", str(out))
        assert r.returncode == 2 and fragment in r.stderr, (name, r.stderr)
        assert not out.exists(), f"{name}: nothing is written"
    assert base.chunk_logs() == {} and cand.chunk_logs() == {}, "no request was sent"
