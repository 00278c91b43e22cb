"""`specguard check` end to end on the real vLLM servers (as endpoint arms), and the report in headless Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specguard.embedded.servers import SERVED_NAME
from tests.browser import inspect_page

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"


def plan_text(base_url: str, cand_url: str) -> str:
    return f"""
name: endpoint-check
arms:
  baseline: {{endpoint: {{base_url: "{base_url}", model: {SERVED_NAME}}}}}
  candidate: {{endpoint: {{base_url: "{cand_url}", model: {SERVED_NAME}}}}}
repetitions: 2
warmup: 1
max_tokens: 32
traffic:
  - {{name: idle, num_requests: 6}}
  - {{name: steady, rate: 4, num_requests: 12, target: true}}
sampling:
  - {{name: greedy, temperature: 0.0}}
prompts:
  - {{source: "synthetic:mixed", count: 12}}
statistics: {{resamples: 300}}
"""


def test_check_verdict_report_and_exit_code_agree(vllm_servers, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text(vllm_servers["baseline"].base_url, vllm_servers["ngram"].base_url))
    out = tmp_path / "check"
    r = subprocess.run(
        [sys.executable, "-m", "specguard", "check", str(plan), "--out", str(out)], capture_output=True, text=True, timeout=900
    )
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] in ("GO", "NO-GO", "INCONCLUSIVE") and verdict["reasons"]
    assert r.returncode == {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 3}[verdict["verdict"]], r.stderr[-2000:]
    assert verdict["verdict"] in r.stdout
    # one line per traffic level x sampling x segment, segments never averaged together
    assert {(x["traffic"], x["segment"]) for x in verdict["lines"]} == {
        (t, s) for t in ("idle", "steady") for s in ("extraction", "chat")
    }
    # the numbers in the verdict are the stored runs' numbers
    for cell in verdict["cells"]:
        obj = cell["objective"]
        assert obj["ci_low"] <= obj["ratio"] <= obj["ci_high"]
        assert cell["acceptance_rate"] is not None and cell["acceptance_rate"] > 0  # the n-gram arm
    # 12 requests per arm and cell cannot support a P99 guardrail: the verdict may not be GO
    assert verdict["verdict"] != "GO"
    assert any("P99" in reason and "more needed" in reason for reason in verdict["reasons"])
    md = (out / "report.md").read_text()
    assert f"**{verdict['verdict']}**" in md and "## Reproduce" in md
    # rebuilding from the stored runs gives the same verdict, and the same exit code; never over the outputs unasked
    refused = subprocess.run([sys.executable, "-m", "specguard", "report", str(out)], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--force" in refused.stderr
    again = subprocess.run(
        [sys.executable, "-m", "specguard", "report", str(out), "--force"], capture_output=True, text=True, timeout=300
    )
    assert again.returncode == r.returncode, again.stderr
    assert json.loads((out / "verdict.json").read_text())["reasons"] == verdict["reasons"]

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    page = inspect_page(
        out / "report.html",
        "[document.querySelectorAll('.js-plotly-plot').length,"
        " document.querySelectorAll('.js-plotly-plot .main-svg').length,"
        " document.getElementById('verdict').innerText,"
        " document.getElementById('forest')._fullData.length,"
        " document.getElementById('distributions')._fullLayout.xaxis.type]",
        shot,
    )
    assert page["errors"] == []
    plots, svgs, banner, forest_traces, dist_axis = page["probe"]
    # the forest plot first, then load, ECDFs, acceptance, gauges (and the GPU panel when the GPUs were sampled)
    assert plots >= 5 and svgs >= plots, page
    assert forest_traces >= 1 and dist_axis == "log", page
    assert verdict["verdict"] in banner
    assert shot.stat().st_size > 20_000
    # self-contained: the page asks for nothing but itself (and inline data)
    assert all(url.startswith(("file:", "data:", "about:")) for url in page["requests"]), page["requests"]


def test_launched_arms_verdict_matches_the_stored_numbers(demo_run, runtime):
    """specguard starts each arm itself, one after the other on one port; the verdict is recomputable by hand.

    The evidence is the demo's own check (launched arms, two repetitions, p95 ITL decides), run once per session.
    """
    import numpy as np

    from specguard.analysis.request_metrics import per_token_itl
    from specguard.results.run_dir import load_run

    out = demo_run.out
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["objective"].startswith("p95 itl_ms"), verdict["objective"]
    inv = verdict["inventory"]
    assert inv["baseline"]["kind"] == "launched" and inv["candidate"]["speculative_config"]["method"] == "ngram"
    # the pinned inventory is embedded, and speculation is the one variable that changed
    base, cand = inv["baseline"]["pinned"], inv["candidate"]["pinned"]
    assert base["vllm_version"] == cand["vllm_version"] == runtime.vllm_version
    assert base["model"]["content_hash"] == cand["model"]["content_hash"] and base["model"]["content_hash"]
    assert cand["speculative_config"]["method"] == "ngram" and base["speculative_config"] is None
    assert base["kv"]["num_gpu_blocks"] > 0 and base["mean_output_tokens"] > 0 and base["max_model_len"] == 1024
    assert verdict["inventory_diff"]["changed_variables"] == ["speculation"]
    assert "pinned: vLLM" in (out / "report.md").read_text()
    port = {a: inv[a]["command"][inv[a]["command"].index("--port") + 1] for a in ("baseline", "candidate")}
    assert port["baseline"] == port["candidate"], "both arms are served on the same port, one after the other"
    assert len(verdict["cells"]) == 12  # 3 traffic levels x 2 sampling settings x 2 segments
    for cell in verdict["cells"]:
        for arm in ("baseline", "candidate"):
            # pooled over both repetitions, per token from the chunks and the server's token counts
            values = [
                itl * 1000
                for rep in ("rep1", "rep2")
                for x in load_run(out / "runs" / arm / rep / f"{cell['traffic']}__{cell['sampling']}__p0")[1]
                if x.ok and x.segment == cell["segment"]
                for itl in per_token_itl(x.chunk_times_s, x.chunk_tokens)
            ]
            assert cell["objective"][arm] == pytest.approx(np.percentile(values, 95))
        line = next(
            x
            for x in verdict["lines"]
            if (x["traffic"], x["sampling"], x["segment"]) == (cell["traffic"], cell["sampling"], cell["segment"])
        )
        obj = cell["objective"]
        expected = (
            "inconclusive"
            if not obj["enough_samples"]
            else "better"
            if obj["ci_high"] < 1
            else "worse"
            if obj["ci_low"] > 1
            else "no detectable difference"
        )
        assert line["status"] == expected


def test_check_refuses_a_bad_plan_and_a_dead_endpoint(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("arms: {}\n")
    r = subprocess.run(
        [sys.executable, "-m", "specguard", "check", str(bad), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "key 'arms.baseline'" in r.stderr
    dead = tmp_path / "dead.yaml"
    dead.write_text(plan_text("http://127.0.0.1:9", "http://127.0.0.1:9"))
    r = subprocess.run(
        [sys.executable, "-m", "specguard", "check", str(dead), "--out", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 4 and "endpoint is gone" in r.stderr
