"""specguard bench against a server that fails: one test per fault of the scripted (fake) server.

Each checks what the request records say (ok, error, http_status, the chunks
kept), the summary's errors, error kinds and warnings, and for command-line
runs the exit code and that no traceback reaches stderr. The server logs
every request it receives, faulty ones named, so a record is checked against
what was really sent.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from specguard.analysis.client_stalls import open_during_stall
from specguard.analysis.request_metrics import per_token_itl
from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.recorder import RecordWritten
from specguard.loadgen.runner import BenchConfig, ProgressSink, run_async, run_bench
from specguard.results.models import LoadShape, RequestRecord, Summary
from specguard.results.run_dir import load_run

# Small and quick: 4 chunks of 1 token, 5 ms apart.
FAST = {"ttft_ms": 5, "interval_ms": 5, "chunks": 4}


def bench_cli(server, out: Path, *args: str, model: str = "scripted") -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specguard",
            "bench",
            "--base-url",
            server.base_url,
            "--model",
            model,
            "--prompts",
            "synthetic:random",
            "--out",
            str(out),
            "--metrics-url",
            "none",
            "--quiet",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in r.stderr, r.stderr
    return r


def bench_inproc(server, out: Path, n: int, timeout_s: float = 10) -> Summary:
    cfg = BenchConfig(
        base_url=server.base_url,
        model="scripted",
        prompts=synthetic_prompts("random", count=4),
        load=LoadShape(kind="concurrency", concurrency=1, num_requests=n),
        metrics_url=None,
        out_dir=out,
        request_timeout_s=timeout_s,
    )
    return run_async(run_bench(cfg))


def records(out: Path) -> list[RequestRecord]:
    return load_run(out)[1]


def summary(out: Path) -> Summary:
    return Summary.model_validate_json((out / "summary.json").read_text())


def split(server, recs: list[RequestRecord]) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """(records of requests the server made faulty, the others), by the server's own log."""
    logs = server.chunk_logs()
    assert set(logs) == {r.request_id for r in recs}, "the server saw exactly the recorded requests"
    faulty = [r for r in recs if logs[r.request_id].fault is not None]
    return faulty, [r for r in recs if logs[r.request_id].fault is None]


def assert_clean(r: RequestRecord, n: int = 4) -> None:
    assert r.ok and r.error is None and r.http_status == 200
    assert r.chunk_tokens == [1] * n and r.token_source == "server_usage" and r.output_tokens == n


def test_wrong_model_is_exit_2_before_any_request(scripted, tmp_path):
    server = scripted(fault="wrong_model_404", **FAST)
    out = tmp_path / "run"
    r = bench_cli(server, out, "--num-requests", "2", model="no-such-model")
    assert r.returncode == 2, r.stderr
    assert "--model no-such-model" in r.stderr and "it serves: scripted" in r.stderr
    assert server.chunk_logs() == {}, "no request may reach the server"
    assert not out.exists()


def test_wrong_model_gets_vllms_404_body_and_the_served_name_streams(scripted, tmp_path):
    server = scripted(fault="wrong_model_404", **FAST)

    def post(model: str) -> urllib.request.Request:
        return urllib.request.Request(
            f"{server.base_url}/v1/completions",
            method="POST",
            data=json.dumps({"model": model, "prompt": "x", "stream": True}).encode(),
            headers={"Content-Type": "application/json"},
        )

    try:
        urllib.request.urlopen(post("other"), timeout=5)
        raise AssertionError("a wrong model must be refused")
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
        assert json.loads(exc.read()) == {
            "error": {"message": "The model `other` does not exist.", "type": "NotFoundError", "param": "model", "code": 404}
        }
    with urllib.request.urlopen(f"{server.base_url}/v1/models", timeout=5) as resp:
        assert [m["id"] for m in json.load(resp)["data"]] == ["scripted"]
    with urllib.request.urlopen(post("scripted"), timeout=5) as resp:
        assert resp.status == 200 and resp.read().endswith(b"data: [DONE]\n\n")


def test_hang_mid_stream_times_out_every_request_exit_4(scripted, tmp_path):
    server = scripted(fault="hang", fault_after_chunks=2, **FAST)
    out = tmp_path / "run"
    t = time.monotonic()
    r = bench_cli(server, out, "--burst", "2", "--request-timeout", "1")
    assert time.monotonic() - t < 20
    assert r.returncode == 4, r.stderr
    assert "every request failed (2): 2 x timed out after 1 s" in r.stderr
    recs = records(out)
    assert len(recs) == 2
    logs = server.chunk_logs()
    for rec in recs:
        assert not rec.ok and rec.error == "timed out after 1 s" and rec.http_status == 200
        assert rec.chunk_tokens == [1, 1] == logs[rec.request_id].chunk_tokens, "chunks before the hang are kept"
        assert rec.stream_end_s is None
    s = summary(out)
    assert s.errors == 2 and s.error_rate == 1.0 and s.error_kinds == {"timed out after 1 s": 2}
    assert "every request failed: 2 x timed out after 1 s" in s.warnings


def test_hang_before_any_answer_on_every_second_request(scripted, tmp_path):
    server = scripted(fault="hang", fault_after_chunks=0, fault_every=2, **FAST)
    out = tmp_path / "run"
    s = bench_inproc(server, out, 2, timeout_s=1)
    faulty, clean = split(server, records(out))
    assert len(faulty) == 1 and len(clean) == 1
    assert_clean(clean[0])
    f = faulty[0]
    assert not f.ok and f.error == "timed out after 1 s"
    assert f.http_status is None and f.chunk_tokens == [] and f.ttft_s is None
    assert f.token_source is None and f.output_tokens is None  # no response: nothing was counted
    assert s.errors == 1 and s.error_kinds == {"timed out after 1 s": 1}
    assert "1 of 2 requests failed: 1 x timed out after 1 s" in s.warnings


def test_drop_mid_stream_on_some_requests_exit_0_with_a_warning(scripted, tmp_path):
    server = scripted(fault="drop", fault_after_chunks=2, fault_every=2, **FAST)
    out = tmp_path / "run"
    r = bench_cli(server, out, "--concurrency", "1", "--num-requests", "4")
    assert r.returncode == 0, r.stderr
    faulty, clean = split(server, records(out))
    assert len(faulty) == 2 and len(clean) == 2
    for rec in clean:
        assert_clean(rec)
    for rec in faulty:
        assert not rec.ok and rec.http_status == 200
        assert rec.error.startswith("ClientPayloadError: Response payload is not completed")
        assert rec.chunk_tokens == [1, 1] and rec.output_tokens == 2 and rec.finish_reason is None
    s = summary(out)
    assert s.requests == 4 and s.errors == 2 and list(s.error_kinds.values()) == [2]
    assert any(w.startswith("2 of 4 requests failed: 2 x ClientPayloadError") for w in s.warnings)


def test_http_500_on_every_request_exit_4(scripted, tmp_path):
    server = scripted(fault="http_500", **FAST)
    out = tmp_path / "run"
    r = bench_cli(server, out, "--burst", "2")
    assert r.returncode == 4, r.stderr
    assert "every request failed (2): 2 x HTTP 500: " in r.stderr and "scripted fault http_500" in r.stderr
    recs = records(out)
    assert len(recs) == 2
    for rec in recs:
        assert not rec.ok and rec.http_status == 500 and rec.chunk_tokens == [] and rec.ttft_s is None
        assert rec.token_source is None and rec.output_tokens is None  # no stream: nothing was counted
        assert rec.error.startswith("HTTP 500: ")
        body = json.loads(rec.error.removeprefix("HTTP 500: "))
        assert body["error"]["type"] == "InternalServerError" and body["error"]["code"] == 500
    s = summary(out)
    assert s.errors == 2 and s.error_kinds == {recs[0].error: 2}
    assert f"every request failed: 2 x {recs[0].error}" in s.warnings


def test_malformed_sse_line_fails_the_request_and_keeps_its_chunks(scripted, tmp_path):
    server = scripted(fault="malformed_sse", fault_after_chunks=2, fault_every=2, **FAST)
    out = tmp_path / "run"
    s = bench_inproc(server, out, 2)
    faulty, clean = split(server, records(out))
    assert_clean(clean[0])
    f = faulty[0]
    assert not f.ok and f.http_status == 200
    assert f.error == "unparsable stream event: b'{this is not json'"
    assert f.chunk_tokens == [1, 1, 1, 1] and f.finish_reason == "length", "every good chunk is kept"
    assert s.error_kinds == {f.error: 1} and f"1 of 2 requests failed: 1 x {f.error}" in s.warnings


def test_stream_without_done_fails_the_request_and_keeps_its_chunks(scripted, tmp_path):
    server = scripted(fault="no_done", **FAST)
    out = tmp_path / "run"
    s = bench_inproc(server, out, 2)
    recs = records(out)
    assert len(recs) == 2
    for rec in recs:
        assert not rec.ok and rec.http_status == 200 and rec.error == "stream ended before [DONE]"
        assert rec.chunk_tokens == [1, 1, 1, 1] and rec.output_tokens == 4 and rec.stream_end_s is not None
    assert s.error_kinds == {"stream ended before [DONE]": 2}
    assert "every request failed: 2 x stream ended before [DONE]" in s.warnings


def test_missing_usage_falls_back_to_chunk_counts_with_a_warning(scripted, tmp_path):
    # chunks carry 1, 3, 1, 3 tokens; without usage the client can only count chunks
    server = scripted(fault="no_usage", fault_every=2, tokens_pattern=[1, 3], **FAST)
    out = tmp_path / "run"
    s = bench_inproc(server, out, 2)
    faulty, clean = split(server, records(out))
    assert len(faulty) == 1 and len(clean) == 1
    c, f = clean[0], faulty[0]
    assert c.ok and c.token_source == "server_usage" and c.chunk_tokens == [1, 3, 1, 3] and c.output_tokens == 8
    assert f.ok and f.error is None and f.token_source == "chunk_count"
    assert f.chunk_tokens == [1, 1, 1, 1] and f.output_tokens == 4 and f.prompt_tokens is None
    assert s.errors == 0 and s.error_kinds == {}
    assert s.token_sources == {"server_usage": 1, "chunk_count": 1}
    assert any("not the server's (token_sources)" in w for w in s.warnings)


def test_error_event_mid_stream_on_every_request_exit_4(scripted, tmp_path):
    server = scripted(fault="error_event", fault_after_chunks=2, **FAST)
    out = tmp_path / "run"
    r = bench_cli(server, out, "--burst", "2")
    assert r.returncode == 4, r.stderr
    message = "server error in stream: scripted fault error_event after 2 chunks"
    assert f"every request failed (2): 2 x {message}" in r.stderr
    recs = records(out)
    assert len(recs) == 2
    for rec in recs:
        assert not rec.ok and rec.http_status == 200 and rec.error == message
        assert rec.chunk_tokens == [1, 1] and rec.finish_reason is None
    s = summary(out)
    assert s.errors == 2 and s.error_kinds == {message: 2} and f"every request failed: 2 x {message}" in s.warnings


def test_a_client_stall_is_counted_and_the_requests_it_touched_are_named(scripted, tmp_path):
    """The client, not the server, stops reading for 150 ms in the middle of a 20-chunk stream: the chunks
    queued meanwhile are read at once (per-token ITL near 0 between them), and the summary says so instead of
    passing that off as the server's speed. Requests before and after the stall are not counted."""
    server = scripted(ttft_ms=5, interval_ms=5, chunks=20)
    cfg = BenchConfig(
        base_url=server.base_url,
        model="scripted",
        prompts=synthetic_prompts("random", count=4),
        load=LoadShape(kind="concurrency", concurrency=1, num_requests=8),
        metrics_url=None,
        out_dir=tmp_path / "run",
    )

    class StallAfterThird(ProgressSink):
        def finished(self, progress: RecordWritten) -> None:
            if progress.seq == 2:  # 30 ms into the fourth request (each takes about 100 ms)
                asyncio.get_running_loop().call_later(0.03, time.sleep, 0.15)

    s = run_async(run_bench(cfg, progress=StallAfterThird()))
    stalls = s.client_stalls
    assert stalls is not None and stalls.count >= 1 and stalls.longest_ms is not None and stalls.longest_ms >= 140
    assert 1 <= stalls.requests_affected <= 2, "one request streams at a time; the stall may straddle two"
    assert any("while the client stalled" in w for w in s.warnings)
    recs = records(tmp_path / "run")
    touched = [r for r in recs if open_during_stall(r, stalls.intervals_s)]
    assert len(touched) == stalls.requests_affected and all(r.ok for r in recs)
    # What a stall does to a measurement: queued chunks share one read, microseconds apart.
    burst = min(min(per_token_itl(r.chunk_times_s, r.chunk_tokens)) for r in touched)
    assert burst < 0.001
    assert Summary.model_validate_json((tmp_path / "run" / "summary.json").read_text()).client_stalls == stalls
