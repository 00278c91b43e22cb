"""The command line, end to end against the scripted server: contract flags, files, exit codes.

In-process (typer's CliRunner, through the same ``run_group`` exit-code mapping as the console script): no
signal is involved here; the tests that send signals run the CLI as a process (test_signals*.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from typer.testing import CliRunner

from specguard.cli.app import app
from specguard.results.models import RequestRecord, Summary


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def specguard(*args: str, env: dict[str, str] | None = None) -> Ran:
    r = CliRunner().invoke(app, list(args), env=env)
    return Ran(r.exit_code, r.stdout, r.stderr)


def test_bench_contract_and_summary(scripted, tmp_path):
    server = scripted(ttft_ms=10, interval_ms=5, chunks=8, tokens_pattern=[1, 3])
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "\n".join(json.dumps({"prompt": f"p{i}", "segment": "s" + str(i % 2), "max_tokens": 8}) for i in range(5)) + "\n"
    )
    out = tmp_path / "run"
    r = specguard(
        "bench",
        "--url",
        server.base_url,
        "--model",
        "scripted",
        "--prompts",
        str(prompts),
        "--out",
        str(out),
        "--rate",
        "20",
        "--arrival",
        "gamma",
        "--burstiness",
        "0.5",
        "--num-requests",
        "12",
        "--seed",
        "3",
        "--quiet",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads((out / "summary.json").read_text())  # --json: the summary, nothing else
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(lines) == 12
    for rec in lines:
        RequestRecord.model_validate(rec)
        assert {"index", "segment", "ok", "error", "ttft_s", "e2e_s", "output_tokens", "chunk_times_s", "chunk_tokens"} <= set(
            rec
        )
        assert 0 <= rec["index"] <= 4 and rec["segment"] == "s" + str(rec["index"] % 2)
        assert rec["chunk_tokens"] == [1, 3, 1, 3, 1, 3, 1, 3] and rec["output_tokens"] == 16
    summary = json.loads((out / "summary.json").read_text())
    Summary.model_validate(summary)
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "tokens_per_chunk"):
        assert set(summary[key]) >= {"mean", "p50", "p90", "p95", "p99"}
    assert summary["requests"] == 12 and summary["errors"] == 0 and summary["acceptance"] is None
    assert summary["output_tokens_per_s"] > 0
    run = json.loads((out / "run.json").read_text())
    assert run["load"]["kind"] == "gamma" and run["load"]["burstiness"] == 0.5
    # the same seed gives the same prompt order and schedule
    out2 = tmp_path / "run2"
    specguard(
        "bench",
        "--base-url",
        server.base_url,
        "--model",
        "scripted",
        "--prompts",
        str(prompts),
        "--out",
        str(out2),
        "--rate",
        "20",
        "--arrival",
        "gamma",
        "--burstiness",
        "0.5",
        "--num-requests",
        "12",
        "--seed",
        "3",
        "--quiet",
    )
    again = sorted((json.loads(x) for x in (out2 / "requests.jsonl").read_text().splitlines()), key=lambda x: x["seq"])
    first = sorted(lines, key=lambda x: x["seq"])
    assert [x["index"] for x in again] == [x["index"] for x in first]
    assert [x["scheduled_s"] for x in again] == [x["scheduled_s"] for x in first]

    shown = specguard("summary", str(out))
    assert shown.returncode == 0 and "ITL per token" in shown.stdout and "tokens per chunk" in shown.stdout
    as_json = specguard("summary", str(out), "--json")
    assert json.loads(as_json.stdout)["requests"] == 12


def test_bad_prompt_file_fails_before_any_traffic(scripted, tmp_path):
    server = scripted()
    prompts = tmp_path / "bad.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"prompt": "x", "temprature": 0.1}\n')
    r = specguard(
        "bench",
        "--base-url",
        server.base_url,
        "--model",
        "scripted",
        "--prompts",
        str(prompts),
        "--out",
        str(tmp_path / "run"),
        "--num-requests",
        "3",
        "--quiet",
    )
    assert r.returncode == 2
    assert f"{prompts}:2:" in r.stderr and "temprature" in r.stderr
    assert server.chunk_logs() == {}, "no request may reach the server"
    assert not (tmp_path / "run").exists()


def test_check_asks_every_endpoint_arm_for_its_model_before_the_first_block(scripted, tmp_path):
    """A candidate whose server does not serve the plan's model is exit 2 before the baseline block runs (it ran whole)."""
    server = scripted()
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        f"""
name: wrong-model
arms:
  baseline: {{endpoint: {{base_url: "{server.base_url}", model: scripted}}}}
  candidate: {{endpoint: {{base_url: "{server.base_url}", model: other-model}}}}
repetitions: 1
warmup: 0
traffic:
  - {{name: steady, concurrency: 1, num_requests: 2, target: true}}
sampling:
  - {{name: greedy, temperature: 0.0}}
prompts:
  - {{source: "synthetic:random", count: 2}}
"""
    )
    r = specguard("check", str(plan), "--out", str(tmp_path / "out"))
    assert r.returncode == 2, r.stderr
    assert (
        f"arms.candidate.endpoint.model other-model: the server at {server.base_url} does not serve that model; "
        "it serves: scripted"
    ) in r.stderr
    assert server.chunk_logs() == {}, "no request may reach the server"
    assert not (tmp_path / "out").exists()


def test_usage_errors_exit_2(tmp_path):
    r = specguard(
        "bench",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--prompts",
        "synthetic:random",
        "--out",
        str(tmp_path / "x"),
        "--rate",
        "1",
        "--concurrency",
        "2",
        "--num-requests",
        "1",
    )
    assert r.returncode == 2 and "only one of" in r.stderr
    r = specguard(
        "bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--prompts", "synthetic:random", "--out", str(tmp_path / "x")
    )
    assert r.returncode == 2 and "--num-requests" in r.stderr
    r = specguard("summary", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "run directory not found" in r.stderr


def test_unreachable_server_gives_error_records_not_a_crash(tmp_path):
    out = tmp_path / "run"
    r = specguard(
        "bench",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--prompts",
        "synthetic:random",
        "--out",
        str(out),
        "--burst",
        "3",
        "--quiet",
    )
    assert r.returncode == 4, r.stderr
    assert "every request failed (3): 3 x ClientConnectorError" in r.stderr and "Traceback" not in r.stderr
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and not any(x["ok"] for x in recs)
    assert all("Connect" in x["error"] for x in recs)
    assert json.loads((out / "summary.json").read_text())["error_rate"] == 1.0


def test_api_key_is_sent_but_never_written(scripted, tmp_path, monkeypatch):
    server = scripted(ttft_ms=2, interval_ms=2, chunks=2)
    out = tmp_path / "run"
    secret = "sk-specguard-test-secret-123"
    proc = specguard(
        "bench",
        "--base-url",
        server.base_url,
        "--model",
        "scripted",
        "--prompts",
        "synthetic:random",
        "--out",
        str(out),
        "--num-requests",
        "2",
        "--api-key-env",
        "SG_TEST_KEY",
        env={"SG_TEST_KEY": secret},
    )
    assert proc.returncode == 0, proc.stderr
    assert all(log.authorized for log in server.chunk_logs().values())
    for f in out.iterdir():
        assert secret not in f.read_text(), f.name
    assert secret not in proc.stdout + proc.stderr


def _word_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "x": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    d = tmp_path / "tok"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    return d


def test_without_server_usage_the_local_tokenizer_counts_and_the_source_is_recorded(scripted, tmp_path):
    # chunks carry 1, 3, 1, 3 words "x"; the server reports usage only at the end
    server = scripted(ttft_ms=5, interval_ms=5, chunks=4, tokens_pattern=[1, 3], usage="final")
    out = tmp_path / "tok-run"
    r = specguard(
        "bench",
        "--base-url",
        server.base_url,
        "--model",
        "scripted",
        "--prompts",
        "synthetic:random",
        "--out",
        str(out),
        "--num-requests",
        "2",
        "--tokenizer",
        str(_word_tokenizer(tmp_path)),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert all(x["token_source"] == "local_tokenizer" and x["chunk_tokens"] == [1, 3, 1, 3] for x in recs)
    assert all(x["output_tokens"] == 8 for x in recs)  # the server's final count still wins for the total
    summary = json.loads((out / "summary.json").read_text())
    assert summary["token_sources"] == {"local_tokenizer": 2}
    assert any("not the server's" in w for w in summary["warnings"])

    # no usage at all and no tokenizer: one token per chunk, said so
    bare = scripted(ttft_ms=5, interval_ms=5, chunks=4, tokens_pattern=[1, 3], usage="none")
    out2 = tmp_path / "bare-run"
    r = specguard(
        "bench",
        "--base-url",
        bare.base_url,
        "--model",
        "scripted",
        "--prompts",
        "synthetic:random",
        "--out",
        str(out2),
        "--num-requests",
        "2",
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (out2 / "requests.jsonl").read_text().splitlines()]
    assert all(x["token_source"] == "chunk_count" and x["chunk_tokens"] == [1, 1, 1, 1] for x in recs)
