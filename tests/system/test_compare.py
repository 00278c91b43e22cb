"""`specguard compare`: statistics over two stored runs, and refusal when they differ in more than the arm."""

from __future__ import annotations

import json
import subprocess
import sys


def bench(server, out, *extra):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specguard",
            "bench",
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--prompts",
            "synthetic:random",
            "--out",
            str(out),
            "--concurrency",
            "8",
            "--num-requests",
            "120",
            "--seed",
            "4",
            "--quiet",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def compare(a, b, *extra):
    return subprocess.run(
        [sys.executable, "-m", "specguard", "compare", str(a), str(b), *extra], capture_output=True, text=True, timeout=120
    )


def test_compare_finds_a_faster_candidate_with_intervals(scripted, tmp_path):
    slow = scripted(ttft_ms=30, interval_ms=12, chunks=12)
    fast = scripted(ttft_ms=30, interval_ms=6, chunks=12, tokens_pattern=[1, 2])
    bench(slow, tmp_path / "base")
    bench(fast, tmp_path / "cand")
    r = compare(tmp_path / "base", tmp_path / "cand", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["comparable"] is True
    for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        for q in ("p50", "p95", "p99"):
            cell = out[metric][q]
            assert {"ratio", "ci_low", "ci_high"} <= set(cell)
    itl = out["itl_ms"]["p50"]
    # 12 ms per token against 3 ms per token (6 ms chunks of 1 and 2 tokens): about 0.25 to 0.5
    assert itl["ci_high"] < 0.6 and itl["ci_low"] <= itl["ratio"] <= itl["ci_high"]
    assert out["e2e_ms"]["p50"]["ci_high"] < 1.0
    assert out["ttft_ms"]["p50"]["ci_low"] < 1.15 and out["ttft_ms"]["p50"]["ci_high"] > 0.85  # same TTFT script
    table = compare(tmp_path / "base", tmp_path / "cand")
    assert table.returncode == 0 and "95% CI" in table.stdout


def test_compare_refuses_runs_that_differ_in_more_than_the_arm(scripted, tmp_path):
    server = scripted(ttft_ms=5, interval_ms=2, chunks=4)
    bench(server, tmp_path / "a")
    bench(server, tmp_path / "b", "--temperature", "0.7")
    r = compare(tmp_path / "a", tmp_path / "b", "--json")
    assert r.returncode == 2
    out = json.loads(r.stdout)["error"]
    assert out["exit_code"] == 2 and out["code"] == "usage_error"
    assert any(d.startswith("sampling.temperature") for d in out["details"]["differences"])
    r = compare(tmp_path / "a", tmp_path / "b")
    assert r.returncode == 2 and "refusing to compare" in r.stderr and "sampling.temperature" in r.stderr


def test_compare_decides_by_prompt_content_not_path(scripted, tmp_path):
    server = scripted(ttft_ms=5, interval_ms=2, chunks=4)
    lines = "\n".join(json.dumps({"prompt": f"question {i}", "max_tokens": 4}) for i in range(6)) + "\n"
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    for d in ("one", "two"):
        (tmp_path / d / "prompts.jsonl").write_text(lines)
    bench(server, tmp_path / "a", "--prompts", str(tmp_path / "one" / "prompts.jsonl"))
    bench(server, tmp_path / "b", "--prompts", str(tmp_path / "two" / "prompts.jsonl"))
    run_a = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run_a["prompt_sha256"] and run_a["sent_sampling"]["max_tokens"] == [4]
    assert compare(tmp_path / "a", tmp_path / "b").returncode == 0, "the same prompts under another path"
    (tmp_path / "two" / "prompts.jsonl").write_text(lines.replace("question 5", "question five"))
    bench(server, tmp_path / "c", "--prompts", str(tmp_path / "two" / "prompts.jsonl"))
    r = compare(tmp_path / "a", tmp_path / "c")
    assert r.returncode == 2 and "prompt content" in r.stderr
    # synthetic sets are compared by their generator parameters
    bench(server, tmp_path / "s1")
    bench(server, tmp_path / "s2", "--seed", "5")
    r = compare(tmp_path / "s1", tmp_path / "s2", "--json")
    assert r.returncode == 2 and "prompt generator" in json.loads(r.stdout)["error"]["message"]


def test_runs_without_a_successful_request_are_not_comparable(tmp_path):
    for name in ("a", "b"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "specguard",
                "bench",
                "--base-url",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--prompts",
                "synthetic:random",
                "--out",
                str(tmp_path / name),
                "--burst",
                "2",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 4
    r = compare(tmp_path / "a", tmp_path / "b")
    assert r.returncode == 2 and "no successful request" in r.stderr
