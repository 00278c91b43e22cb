"""``sim serve`` under a real ``specguard bench``: token counts, chunking under speculation, vLLM-named metrics whose
acceptance matches the configured rates, the simulated markers, and timing that follows the engine's own step times.

The server runs as a subprocess (``SimServeProcess``, the way the scripted server does); bench runs in-process.
Timing is judged against the engine model's predicted step duration (``build_arm``'s step time at the smallest
and the largest batch the run can have), never against a fixed number of milliseconds.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.results.models import LoadShape, SamplingOverrides
from specguard.results.run_dir import load_run
from specguard.server_metrics.parse import parse_metrics_text
from specguard.sim.run import SimRequest, build_arm
from specguard.sim.serve_process import SimServeProcess
from specguard.sim.step_time import StepLoad
from specguard.simulated import SIM_HEADER, is_simulated_version
from tests.helpers import alive, wait_gone

ACCEPTANCE = [0.8, 0.6, 0.4]
K = len(ACCEPTANCE)
MAX_TOKENS = 32
MAX_SEQS = 8
# Steps of an 8B model on one H100 are 8-10 ms in the roofline; x4 they are long enough that a busy 2-core
# machine's scheduling noise (a few ms) is small beside them.
TIME_SCALE = 4.0
REQUESTS = 40


def _req(speculative: bool) -> SimRequest:
    spec = {"method": "ngram", "acceptance": ACCEPTANCE} if speculative else {}
    return SimRequest(target="llama-3.1-8b", gpu="h100-80gb", rates=[1.0], max_num_seqs=MAX_SEQS, seed=1, **spec)


@pytest.fixture
def sim_server(tmp_path: Path):
    started: list[SimServeProcess] = []

    def start(speculative: bool) -> SimServeProcess:
        proc = SimServeProcess(_req(speculative), tmp_path / f"sim-{len(started)}", time_scale=TIME_SCALE)
        started.append(proc)
        proc.__enter__()
        return proc

    yield start
    for p in started:
        p.stop()


def _bench(server: SimServeProcess, out: Path, api: str = "completions") -> None:
    cfg = BenchConfig(
        base_url=server.base_url,
        model="sim",
        api=api,  # type: ignore[arg-type]
        prompts=synthetic_prompts("random", count=8, max_tokens=MAX_TOKENS),
        load=LoadShape(kind="poisson", rate=10.0, num_requests=REQUESTS, seed=3),
        sampling=SamplingOverrides(max_tokens=MAX_TOKENS, ignore_eos=True),
        metrics_url=server.metrics_url,
        gpu_metrics_url="none",
        out_dir=out,
        scrape_interval_s=0.5,
    )
    run_async(run_bench(cfg))


def _decode_step_s(req: SimRequest, batch: int, context_per_seq: int) -> float:
    """The engine model's duration of a pure-decode step (as ``SimEngine._fast_step`` computes it), wall-scaled."""
    config, step = build_arm(req, speculative=req.method is not None)
    k = K if config.speculation else 0
    ctx = batch * (context_per_seq + 1 + k)
    s = step(StepLoad(batch, batch * (1 + k), ctx, float(ctx) * (1 + k)))
    if config.speculation is not None:
        s += config.speculation.proposer(batch, k, batch * (context_per_seq + 1))
    return s * TIME_SCALE


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_speculative_server_under_bench(sim_server, tmp_path: Path) -> None:
    server = sim_server(True)
    _bench(server, tmp_path / "run")
    info, records, samples = load_run(tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(records) == REQUESTS and all(r.ok for r in records)
    assert is_simulated_version(info.server_version)
    # every request generated max_tokens, counted from the server's running usage, several tokens per chunk
    assert all(r.output_tokens == MAX_TOKENS == sum(r.chunk_tokens) for r in records)
    assert all(r.token_source == "server_usage" for r in records)
    tokens = np.concatenate([r.chunk_tokens for r in records])
    assert tokens.max() == K + 1 and (tokens > 1).mean() > 0.5
    # per-token ITL: each chunk gap spread evenly over that chunk's server-counted tokens
    per_token = np.concatenate([np.repeat(np.diff(r.chunk_times_s) / r.chunk_tokens[1:], r.chunk_tokens[1:]) for r in records])
    assert summary["itl_ms"]["count"] == len(per_token) == REQUESTS * (MAX_TOKENS - 1)
    assert summary["itl_ms"]["mean"] == pytest.approx(per_token.mean() * 1000, rel=0.01)
    assert summary["itl_ms"]["p50"] < summary["inter_chunk_ms"]["p50"]
    # vLLM's acceptance counters, read by specguard's own parser, match the configured rates within 4 sigma
    acc = summary["acceptance"]
    assert acc is not None and acc["drafts"] > 200
    for got, want in zip(acc["per_position"], ACCEPTANCE, strict=True):
        assert abs(got - want) < 4 * math.sqrt(want * (1 - want) / acc["drafts"]) + 0.01
    assert acc["mean_length"] == pytest.approx(1 + sum(ACCEPTANCE), abs=0.25)
    assert {k: v for k, v in summary["finished_by_reason"].items() if v} == {"length": REQUESTS}
    assert summary["server_generation_tokens"] == REQUESTS * MAX_TOKENS
    # timing follows the engine's predicted decode step (wall-scaled), between a lone request and a full batch
    prompt = max(r.prompt_tokens or 0 for r in records)
    fastest = _decode_step_s(_req(True), 1, 1)
    slowest = _decode_step_s(_req(True), MAX_SEQS, prompt + MAX_TOKENS)
    gaps = np.concatenate([np.diff(r.chunk_times_s) for r in records])
    assert np.median(gaps) >= 0.9 * fastest, (np.median(gaps), fastest)
    assert np.median(gaps) <= 2.0 * slowest, (np.median(gaps), slowest)
    ttfts = np.array([r.ttft_s for r in records if r.ttft_s is not None])
    assert ttfts.min() >= 0.9 * fastest  # a prefill step is at least a decode step
    tpot = summary["tpot_ms"]["p50"] / 1000
    mean_chunk = tokens.mean()
    assert 0.9 * fastest / (K + 1) <= tpot <= 2.0 * slowest / mean_chunk
    # the scraped /metrics parse, and show the server's queue and KV gauges
    assert samples and all(s.ok for s in samples)
    assert {"kv_cache_usage", "requests_running", "requests_waiting"} <= set(samples[-1].gauges)


def test_baseline_server_sends_one_token_per_chunk_and_no_spec_counters(sim_server, tmp_path: Path) -> None:
    server = sim_server(False)
    _bench(server, tmp_path / "run", api="chat")
    _, records, samples = load_run(tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(records) == REQUESTS and all(r.ok and r.output_tokens == MAX_TOKENS for r in records)
    assert all(r.chunk_tokens == [1] * MAX_TOKENS for r in records)
    assert summary["acceptance"] is None and not any("spec_drafts" in s.counters for s in samples)
    gaps = np.concatenate([np.diff(r.chunk_times_s) for r in records])
    fastest = _decode_step_s(_req(False), 1, 1)
    slowest = _decode_step_s(_req(False), MAX_SEQS, max(r.prompt_tokens or 0 for r in records) + MAX_TOKENS)
    assert 0.9 * fastest <= np.median(gaps) <= 2.0 * slowest


def test_every_response_says_simulated(sim_server) -> None:
    server = sim_server(True)
    base = server.base_url
    status, headers, body = _get(f"{base}/version")
    version = json.loads(body)
    assert status == 200 and version["simulated"] is True and version["version"].startswith("0.32.0")
    status, headers_m, body = _get(f"{base}/v1/models")
    assert [m["id"] for m in json.loads(body)["data"]] == ["sim"] and json.loads(body)["data"][0]["simulated"] is True
    status_h, headers_h, _ = _get(f"{base}/health")
    status_x, headers_x, text = _get(f"{base}/metrics")
    sample = parse_metrics_text(text.decode(), 0.0, "before")
    assert "spec_drafts" in sample.counters and sample.cache_config is not None
    one = {"model": "sim", "prompt": "one two three four", "max_tokens": 5}
    status_c, headers_c, body_c = _post(f"{base}/v1/completions", one)
    whole = json.loads(body_c)
    assert whole["usage"]["completion_tokens"] == 5 and whole["choices"][0]["text"] == " tok" * 5
    assert whole["usage"]["prompt_tokens"] == math.ceil(4 * 1.3)
    status_s, headers_s, stream = _post(
        f"{base}/v1/chat/completions",
        {
            "model": "sim",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        },
    )
    events = [json.loads(e[6:]) for e in stream.decode().split("\n\n") if e.startswith("data: {")]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 6
    assert sum(len(e["choices"][0]["token_ids"]) for e in events[:-1]) == 6
    assert all("usage" not in e for e in events[:-1])  # include_usage without continuous_usage_stats: final only
    status_404, headers_404, _ = _post(f"{base}/v1/completions", {**one, "model": "other"})
    assert (status_c, status_s, status_h, status_x, status_404) == (200, 200, 200, 200, 404)
    for h in (headers, headers_m, headers_h, headers_x, headers_c, headers_s, headers_404):
        assert h.get(SIM_HEADER) == "true"


def test_the_server_dies_with_its_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from specguard.sim.run import SimRequest
        from specguard.sim.serve_process import SimServeProcess
        p = SimServeProcess(SimRequest(target="llama-3.1-8b", gpu="h100-80gb", rates=[1.0]), Path({str(tmp_path)!r}))
        p.__enter__()
        print(p.proc.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert not wait_gone({child}, 15), "the simulated server outlived its parent"
    finally:
        parent.kill()


def test_a_client_that_goes_away_leaves_the_server_serving(sim_server) -> None:
    import socket
    import time

    server = sim_server(False)
    body = json.dumps({"model": "sim", "prompt": "a b c", "max_tokens": 50, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        assert b"data: {" in sock.recv(65536) or b"data: {" in sock.recv(65536)
    # the engine has no abort: the request runs to its end (50 steps), its tokens dropped; the next one is served
    status, _, whole = _post(f"{server.base_url}/v1/completions", {"model": "sim", "prompt": "x", "max_tokens": 3})
    assert status == 200 and json.loads(whole)["usage"]["completion_tokens"] == 3
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        sample = parse_metrics_text(_get(server.metrics_url)[2].decode(), 0.0, "after")
        if sample.gauges["requests_running"] == 0 and sample.finished_by_reason.get("length") == 1:
            break
        time.sleep(0.2)
    # counted as vLLM counts a disconnect (abort), while the engine, which cannot abort, generated all 50 tokens
    assert sample.finished_by_reason == {"stop": 0.0, "length": 1.0, "abort": 1.0} and sample.gauges["requests_running"] == 0
    assert sample.counters["generation_tokens"] == 53
