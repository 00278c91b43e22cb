"""`specguard inventory` against the real embedded vLLM servers, and `inventory diff`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specguard.embedded.servers import NGRAM_CONFIG


def _sg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specguard", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.vllm
def test_inventory_of_running_servers_and_their_diff(vllm_servers, models, runtime, tmp_path: Path) -> None:
    base, cand = tmp_path / "baseline.json", tmp_path / "candidate.json"
    r = _sg("inventory", "--url", vllm_servers["baseline"].base_url, "--out", str(base))
    assert r.returncode == 0, r.stderr
    r = _sg("inventory", "--url", vllm_servers["ngram"].base_url, "--config", json.dumps(NGRAM_CONFIG), "--out", str(cand))
    assert r.returncode == 0, r.stderr
    b, c = json.loads(base.read_text()), json.loads(cand.read_text())
    assert b["vllm_version"] == c["vllm_version"] == runtime.vllm_version
    assert b["model"]["name"] == str(models.path("target")) and b["model"]["content_hash"].startswith("sha256:")
    assert b["kv"]["num_gpu_blocks"] == int(b["kv"]["num_gpu_blocks"]) > 0 and b["kv"]["block_size"]
    assert b["gpu"] == "none visible (CPU)" and b["max_model_len"] == 1024
    assert c["speculative_config"] == NGRAM_CONFIG and any("speculation is off" in n for n in b["notes"])
    d = _sg("inventory", "diff", str(base), str(cand), "--json")
    assert d.returncode == 0, d.stderr
    assert json.loads(d.stdout)["changed_variables"] == ["speculation"]
    # a second change (quantization) next to speculation: warned, exit 1
    c["quantization"] = "fp8"
    cand.write_text(json.dumps(c))
    d = _sg("inventory", "diff", str(base), str(cand))
    assert d.returncode == 1 and "2 variables changed" in d.stderr


def test_inventory_diff_refuses_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    r = _sg("inventory", "diff", str(bad), str(bad))
    assert r.returncode == 2 and str(bad) in r.stderr


def test_inventory_of_a_plan_arm_and_a_three_variable_change(tmp_path: Path) -> None:
    plan = Path(__file__).parents[2] / "examples" / "gpu-llama70b-draft8b.yaml"
    base, cand = tmp_path / "b.json", tmp_path / "c.json"
    assert _sg("inventory", "--plan", str(plan), "--arm", "baseline", "--gpu", "8 x H100", "--out", str(base)).returncode == 0
    r = _sg("inventory", "--plan", str(plan), "--arm", "candidate", "--gpu", "8 x H100", "--out", str(cand))
    assert r.returncode == 0, r.stderr
    c = json.loads(cand.read_text())
    assert c["draft"]["name"] == "meta-llama/Llama-3.1-8B-Instruct" and c["tensor_parallel_size"] == 4
    assert c["gpu"] == "8 x H100" and any("--url" in n for n in c["notes"])
    assert json.loads(_sg("inventory", "diff", str(base), str(cand), "--json").stdout)["changed_variables"] == ["speculation"]
    c.update(quantization="fp8", vllm_version="0.33.0")
    cand.write_text(json.dumps(c))
    r = _sg("inventory", "diff", str(base), str(cand))
    assert r.returncode == 1 and "3 variables changed" in r.stderr
    assert "quantization" in r.stdout and "speculative_config" in r.stdout
