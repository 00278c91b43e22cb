"""check --baseline-run: the baseline taken from a run that exists, only the candidate measured.

The baseline stands for a scripted server of fixed timing (TTFT 150 ms, one token per chunk 10 ms apart): a
`specguard bench` run of it, or the same timings written as a vllm bench or GuideLLM file. The candidate is a
scripted server about four times faster per token (two tokens per chunk 5 ms apart, TTFT 5 ms), so the verdict
is GO by construction; the plan's baseline endpoint is a live server that must see no request from the check.
The P99 guardrails allow x2: on a shared CI machine a P99 of 100 requests is the machine's stalls (a candidate
with a 5 ms TTFT showed 139 and 209 ms in one run), and these tests are about where the baseline comes from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.foreign_files import guidellm_report, vllm_bench_result
from tests.helpers import no_traceback

N = 100  # requests per run: with min_tail_samples 1 the P99 guardrails need 100 per arm
CELL = "steady__greedy__p0"

PLAN = """
name: imported-baseline
arms:
  baseline: {{endpoint: {{base_url: "{base}", model: scripted}}}}
  candidate: {{endpoint: {{base_url: "{cand}", model: scripted}}}}
repetitions: 2
warmup: 0
max_tokens: 8
traffic:
  - {{name: steady, concurrency: 4, num_requests: {n}, target: true}}
sampling:
  - {{name: greedy, temperature: 0.0}}
prompts:
  - {{source: "synthetic:random", count: 8}}
objective: {{metric: {metric}, percentile: p50, min_improvement: 0.2}}
guardrails: {{max_error_rate_increase: 0.05, max_p99_ttft_regression: 1.0, max_p99_e2e_regression: 1.0}}
statistics: {{resamples: 200, min_tail_samples: 1}}
"""


def specguard(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "specguard", *args], capture_output=True, text=True, timeout=timeout)
    assert no_traceback(r.stdout, r.stderr), r.stderr
    return r


@pytest.fixture
def servers(scripted):  # type: ignore[no-untyped-def]
    base = scripted(ttft_ms=150, interval_ms=10, chunks=8, tokens_pattern=[1])
    cand = scripted(ttft_ms=5, interval_ms=5, chunks=4, tokens_pattern=[2])
    return base, cand


def write_plan(tmp_path: Path, base, cand, metric: str = "itl_ms") -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(base=base.base_url, cand=cand.base_url, n=N, metric=metric))
    return path


def check_with(plan: Path, out: Path, *runs: str) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    args = [a for run in runs for a in ("--baseline-run", run)]
    r = specguard("check", str(plan), "--out", str(out), "--quiet", *args)
    assert (out / "verdict.json").exists(), r.stdout[-3000:] + r.stderr[-3000:]
    return r, json.loads((out / "verdict.json").read_text())


def assert_imported(out: Path, v: dict, source: Path, fmt: str) -> None:  # type: ignore[type-arg]
    """The verdict, the record and both reports say the baseline was imported, from where, and what that lacks."""
    assert [(b["cell"], b["source"], b["format"], b["requests"]) for b in v["baseline_imports"]] == [
        (CELL, str(source.resolve()), fmt, N)
    ]
    assert any(f"imported from {source.resolve()} ({fmt})" in w and "never widened" in w for w in v["warnings"])
    assert v["inventory"]["baseline"]["kind"] == f"imported ({fmt})"
    record = json.loads((out / "check.json").read_text())
    assert record["baseline_imports"][0]["sha256"] == v["baseline_imports"][0]["sha256"]
    state = json.loads((out / "check-state.json").read_text())
    assert state["blocks"] == state["done"] == ["candidate rep1", "candidate rep2"]
    assert sorted(p.name for p in (out / "runs" / "baseline").iterdir()) == ["rep1"]
    assert "## Baseline: imported, not measured" in (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert 'id="baseline-imports"' in html and str(source.resolve()) in html
    assert f"--baseline-run {CELL}={source.resolve()}" in " ".join(v["commands"])


def test_a_bench_run_as_baseline_gives_go_and_the_baseline_server_sees_no_request(servers, tmp_path):
    base, cand = servers
    run = tmp_path / "baseline-run"
    r = specguard(
        "bench", "--base-url", base.base_url, "--model", "scripted", "--prompts", "synthetic:random",
        "--prompt-count", "8", "--seed", "0", "--temperature", "0", "--max-tokens", "8",
        "--concurrency", "4", "--num-requests", str(N), "--warmup", "0", "--out", str(run), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    seen = len(base.chunk_logs())
    assert seen == N

    out = tmp_path / "check"
    r, v = check_with(write_plan(tmp_path, base, cand), out, str(run))
    assert len(base.chunk_logs()) == seen, "the check sent requests to the baseline"
    assert len(cand.chunk_logs()) == 2 * N
    assert (r.returncode, v["verdict"]) == (0, "GO"), v["reasons"]
    assert_imported(out, v, run, "specguard")
    (cell,) = v["cells"]
    assert cell["objective"]["n_baseline"] == N and cell["objective"]["n_candidate"] == 2 * N
    assert cell["objective"]["baseline"] == pytest.approx(10.0, rel=0.3)  # the bench run's own ITL, not re-measured
    assert not cell["objective"]["repetition_spread_widened"]

    # specguard report rebuilds the same verdict from the stored runs, the imported one included
    again = specguard("report", str(out), "--force")
    assert again.returncode == 0 and json.loads((out / "verdict.json").read_text())["verdict"] == "GO"


def test_a_vllm_bench_file_as_baseline_gives_go_and_flags_its_per_chunk_gaps(servers, tmp_path):
    base, cand = servers
    # 10 of the 100 requests came in chunks of two tokens: their gaps are not per token, left out of itl_ms
    f = vllm_bench_result(tmp_path / "vllm-bench.json", n=N, ttft_s=0.15, itl_s=0.01, output_len=8, multi_token=10)
    out = tmp_path / "check"
    r, v = check_with(write_plan(tmp_path, base, cand), out, f"{CELL}={f}")
    assert base.chunk_logs() == {}, "the check sent requests to the baseline"
    assert (r.returncode, v["verdict"]) == (0, "GO"), v["reasons"]
    assert_imported(out, v, f, "vllm-bench")
    assert any("10 of 100 successful requests delivered more tokens than chunks" in w for w in v["warnings"])
    assert any("no server metrics" in w for w in v["warnings"])
    (cell,) = v["cells"]
    assert cell["objective"]["baseline"] == pytest.approx(10.0)  # the file's per-token ITL, exactly
    assert cell["metrics"]["ttft_ms"]["p50"]["baseline"] == pytest.approx(150.0)


def test_a_guidellm_file_as_baseline_gives_go_on_tpot(servers, tmp_path):
    base, cand = servers
    f = guidellm_report(tmp_path / "benchmarks.json", n=N, ttft_ms=150.0, itl_ms=10.0, output_tokens=8)
    out = tmp_path / "check"
    r, v = check_with(write_plan(tmp_path, base, cand, metric="tpot_ms"), out, str(f))
    assert base.chunk_logs() == {}, "the check sent requests to the baseline"
    assert (r.returncode, v["verdict"]) == (0, "GO"), v["reasons"]
    assert_imported(out, v, f, "guidellm")
    assert any("GuideLLM keeps no chunk times" in w for w in v["warnings"])
    (cell,) = v["cells"]
    assert cell["objective"]["baseline"] == pytest.approx(10.0)  # GuideLLM's inter_token_latency_ms is TPOT


def test_a_foreign_baseline_of_other_prompts_leaves_the_cell_without_comparison(servers, tmp_path):
    """A file's prompts are known by their token counts only, which the plan's prompts have once the candidate ran."""
    base, cand = servers
    f = vllm_bench_result(tmp_path / "other.json", n=N, ttft_s=0.15, itl_s=0.01, output_len=8, input_len=500)
    out = tmp_path / "check"
    r, v = check_with(write_plan(tmp_path, base, cand), out, str(f))
    assert (r.returncode, v["verdict"]) == (3, "INCONCLUSIVE")
    (reason,) = v["reason_details"]
    assert (
        reason["code"] == "baseline_mismatch" and "not the same prompts" in reason["text"] and str(f.resolve()) in reason["text"]
    )
    assert v["cells"] == [] and v["lines"] == []
