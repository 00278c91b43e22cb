"""Against real vLLM CPU servers (baseline and n-gram speculation), started once per session."""

from __future__ import annotations

import json

import pytest

from specguard.embedded.servers import SERVED_NAME
from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.results.models import LoadShape, SamplingOverrides
from specguard.results.run_dir import load_run

pytestmark = pytest.mark.vllm


def bench(server, out, prompts, load, temperature=0.0):
    cfg = BenchConfig(
        base_url=server.base_url,
        model=SERVED_NAME,
        prompts=prompts,
        load=load,
        sampling=SamplingOverrides(temperature=temperature, max_tokens=48),
        metrics_url=server.metrics_url,
        out_dir=out,
        scrape_interval_s=0.5,
    )
    return run_async(run_bench(cfg))


def test_runtime_reports_its_workarounds(runtime):
    assert runtime.vllm_version == "0.32.0"
    assert not runtime.console_script_ok
    assert runtime.serve_argv[1:] == ["-m", "vllm.entrypoints.openai.api_server"]
    text = " ".join(runtime.workarounds)
    assert "console script" in text and "PackageNotFoundError" in text
    assert "torchvision" in text


def test_ngram_on_repetitive_prompts_accepts_and_chunks_carry_several_tokens(vllm_servers, tmp_path):
    server = vllm_servers["ngram"]
    out = tmp_path / "ngram"
    summary = bench(
        server,
        out,
        synthetic_prompts("repetitive", count=16),
        LoadShape(kind="poisson", rate=4.0, num_requests=16, warmup_requests=1, seed=1),
    )
    assert summary.errors == 0
    assert summary.acceptance is not None
    assert summary.acceptance.drafts > 0 and summary.acceptance.rate > 0
    assert summary.acceptance.mean_length > 1.0
    assert len(summary.acceptance.per_position) == 4
    assert summary.tokens_per_chunk.max > 1
    info, records, samples = load_run(out)
    assert info.server_version == "0.32.0"
    assert info.cache_config is not None and "num_gpu_blocks" in info.cache_config
    assert any(r.chunk_tokens and max(r.chunk_tokens) > 1 for r in records)
    for r in records:
        assert r.token_source == "server_usage"
        assert sum(r.chunk_tokens) == r.output_tokens
        itl_sum = sum(
            g / n * n for g, n in zip([b - a for a, b in zip(r.chunk_times_s, r.chunk_times_s[1:])], r.chunk_tokens[1:])
        )
        assert itl_sum == pytest.approx(r.e2e_s - r.ttft_s, abs=1e-9)
    # per-token ITL summed over the run equals the summed (E2E - TTFT): nothing double counted or dropped
    from specguard.analysis.request_metrics import per_token_itl

    total_itl = sum(sum(per_token_itl(r.chunk_times_s, r.chunk_tokens)) for r in records)
    assert total_itl == pytest.approx(sum(r.e2e_s - r.ttft_s for r in records), rel=1e-9)
    # server counters agree with the client: every request and token this run received
    assert sum(summary.finished_by_reason.values()) == len(records)
    assert summary.server_generation_tokens == sum(r.output_tokens for r in records)
    assert not any("foreign" in w for w in summary.warnings)
    assert [s.phase for s in samples][0] == "before" and samples[-1].phase == "after"


def test_baseline_has_no_spec_decode_counters_and_says_so(vllm_servers, tmp_path):
    server = vllm_servers["baseline"]
    summary = bench(
        server,
        tmp_path / "base",
        synthetic_prompts("repetitive", count=8),
        LoadShape(kind="concurrency", concurrency=2, num_requests=8),
    )
    assert summary.errors == 0
    assert summary.acceptance is None
    assert any("no spec-decode counters" in n for n in summary.notes)
    # without speculation a chunk carries one token; vLLM V1 merges outputs the API server has not yet sent
    # (when it falls behind, as on shared cores), so an occasional chunk carries more: per-token ITL handles it
    assert summary.tokens_per_chunk.p50 == 1
    data = json.loads((tmp_path / "base" / "summary.json").read_text())
    assert data["acceptance"] is None


def test_foreign_traffic_on_the_server_is_detected(vllm_servers, tmp_path):
    """A second client hitting the same server during a run contaminates the server-side figures."""
    import subprocess
    import sys
    import threading
    import time

    server = vllm_servers["baseline"]
    out = tmp_path / "run"
    intruder_script = (
        "import json, sys, urllib.request\n"
        "body = json.dumps({'model': sys.argv[2], 'prompt': 'hello', 'max_tokens': 16}).encode()\n"
        "for _ in range(3):\n"
        "    req = urllib.request.Request(sys.argv[1] + '/v1/completions', body, {'Content-Type': 'application/json'})\n"
        "    urllib.request.urlopen(req, timeout=60).read()\n"
    )

    def intruder():
        # start once the run's time origin is set (run.json is written then), from another process
        deadline = time.monotonic() + 60
        while not (out / "run.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run([sys.executable, "-c", intruder_script, server.base_url, SERVED_NAME], check=True, timeout=60)

    t = threading.Thread(target=intruder)
    t.start()
    summary = bench(server, out, synthetic_prompts("random", count=6), LoadShape(kind="constant", rate=1.0, num_requests=6))
    t.join()
    assert any("foreign traffic" in w for w in summary.warnings), summary.warnings


def test_chat_endpoint_on_real_vllm(vllm_servers, tmp_path):
    """The chat API: the role-only first chunk carries no tokens and does not count as the first token."""
    cfg = BenchConfig(
        base_url=vllm_servers["ngram"].base_url,
        model=SERVED_NAME,
        api="chat",
        prompts=synthetic_prompts("repetitive", count=4),
        load=LoadShape(kind="idle", num_requests=4),
        sampling=SamplingOverrides(temperature=0.0, max_tokens=32),
        metrics_url=vllm_servers["ngram"].metrics_url,
        out_dir=tmp_path / "chat",
    )
    summary = run_async(run_bench(cfg))
    assert summary.errors == 0
    _, records, _ = load_run(tmp_path / "chat")
    for r in records:
        assert r.token_source == "server_usage" and all(n > 0 for n in r.chunk_tokens)
        assert sum(r.chunk_tokens) == r.output_tokens > 0
        assert r.prompt_tokens and r.prompt_tokens > 0
    assert summary.acceptance is not None and summary.acceptance.drafts > 0


def test_compare_baseline_and_ngram_runs_of_the_same_workload(vllm_servers, tmp_path):
    from specguard.analysis.compare import compare_runs

    load = LoadShape(kind="constant", rate=3.0, num_requests=12, seed=2)
    prompts = synthetic_prompts("repetitive", count=12)
    runs = {}
    for arm in ("baseline", "ngram"):
        bench(vllm_servers[arm], tmp_path / arm, prompts, load)
        info, records, _ = load_run(tmp_path / arm)
        runs[arm] = (info, records)
    result = compare_runs("baseline", runs["baseline"], "ngram", runs["ngram"])
    assert result.comparable, result.differences
    summaries = {arm: json.loads((tmp_path / arm / "summary.json").read_text()) for arm in runs}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"):
        cell = result.metrics[metric]["p50"]
        # the comparison's point estimates are the run summaries' own percentiles
        assert cell.baseline == pytest.approx(summaries["baseline"][metric]["p50"])
        assert cell.candidate == pytest.approx(summaries["ngram"][metric]["p50"])
        assert cell.ci_low <= cell.ratio <= cell.ci_high


def test_predicted_kv_blocks_match_the_real_server(vllm_servers, models):
    """Gate 3's formula against vLLM's own count: the pool the server reports in vllm:cache_config_info."""
    import urllib.request

    from specguard.server_metrics.parse import parse_metrics_text
    from specguard.sizing.kv import num_blocks, shape_from_model_dir

    for name in ("baseline", "ngram"):  # n-gram keeps no draft KV: the same pool
        with urllib.request.urlopen(vllm_servers[name].metrics_url, timeout=10) as resp:
            cache = parse_metrics_text(resp.read().decode(), 0.0, "before").cache_config
        assert cache is not None
        predicted = num_blocks(
            int(cache["kv_cache_memory_bytes"]),
            [(shape_from_model_dir(models.path("target")), 2)],
            block_size=int(cache["block_size"]),
        )
        assert predicted == int(cache["num_gpu_blocks"])
