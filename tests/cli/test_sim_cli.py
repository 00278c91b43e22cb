"""`specguard sim run` in-process: the JSON contract, the table, the HTML report, and bad options refused before any
simulated step (exit 2, one line naming the option, no traceback)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

import specguard.sim.run as sim_run
from specguard.cli.sim import SimMethodOption
from specguard.sim.results import SIMULATED_BANNER
from tests.cli.helpers import USAGE, Cli, Guard, case_id

# 60 simulated seconds per rate keeps a two-rate, two-arm run under a second here
BASE = ["sim", "run", "--target", "llama-3.1-8b", "--gpu", "h100-80gb", "--prompt-len", "256", "--output-len", "128"]
BASE += ["--duration", "60"]
DRAFT = ["--method", "draft_model", "--draft", "llama-3.2-1b", "--num-speculative-tokens", "3", "--acceptance", "0.8,0.6,0.4"]
RATES = ["--rate", "2", "--rate", "16"]
METRICS = ("tpot_ms", "itl_ms", "ttft_ms", "e2e_ms")


@pytest.fixture(autouse=True)
def simulations(monkeypatch: pytest.MonkeyPatch, guard: Guard) -> None:
    """Every simulated arm is recorded in the guard: a refused option must leave it empty."""
    real = sim_run.simulate_arm

    def recorded(*args: Any, **kwargs: Any) -> Any:
        guard.events.append("simulate_arm")
        return real(*args, **kwargs)

    monkeypatch.setattr(sim_run, "simulate_arm", recorded)


def test_json_holds_the_contract_keys_per_rate_and_arm(cli: Cli) -> None:
    r = cli.invoke([*BASE, *RATES, *DRAFT, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["simulated"] is True and doc["banner"] == SIMULATED_BANNER
    assert "crossover_rate" in doc and (doc["crossover_rate"] is None or doc["crossover_rate"] in (2.0, 16.0))
    assert [p["rate"] for p in doc["rates"]] == [2.0, 16.0]
    for p in doc["rates"]:
        for arm in ("baseline", "speculative"):
            a = p[arm]
            for m in METRICS:
                assert a[m]["p50"] > 0 and a[m]["p99"] >= a[m]["p50"], (arm, m, a[m])
            assert a["throughput_tokens_per_s"] > 0
        assert p["speculative"]["mean_accepted_length"] > 1
    setup = doc["setup"]
    assert setup["method"] == "draft_model" and setup["draft"] == "llama-3.2-1b" and setup["acceptance"] == [0.8, 0.6, 0.4]
    assert doc["k_schedule_config"]["num_speculative_tokens_per_batch_size"][0][0] == 1
    assert doc["k_schedule_vllm_version"]


def test_table_shows_both_arms_the_crossover_and_the_band_config(cli: Cli) -> None:
    r = cli.invoke([*BASE, *RATES, *DRAFT, "--vllm-version", "0.11.0"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert out.startswith(SIMULATED_BANNER) and "not a measurement" in out
    for label in ("TPOT (ms)", "ITL (ms)", "TTFT (ms)", "E2E (ms)", "throughput (tok/s)", "speed-up (p50)"):
        assert label in out
    assert "crossover (e2e_ms p50):" in out
    config_lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert len(config_lines) == 1  # one JSON line, not wrapped: it can be pasted as is
    assert json.loads(config_lines[0])["model"] == "llama-3.2-1b"
    assert "for vLLM 0.11.0" in out and "preflight findings on that config:" in out


def test_baseline_alone_runs_and_says_there_is_no_speculative_arm(cli: Cli, tmp_path: Path) -> None:
    page = tmp_path / "baseline.html"
    r = cli.invoke([*BASE, "--rate", "4", "--duration", "30", "--html", page])
    assert r.exit_code == 0, r.output
    assert "crossover: none (no speculative arm)" in r.stdout and "speculative config" not in r.stdout
    shown = html.unescape(page.read_text())
    assert "no speculative arm: no k schedule" in shown and "crossover: none (no speculative arm)" in shown


def test_html_is_written_with_the_banner_and_not_overwritten_without_force(cli: Cli, tmp_path: Path) -> None:
    page = tmp_path / "sim.html"
    r = cli.invoke([*BASE, "--rate", "4", *DRAFT, "--html", page, "--json"])
    assert r.exit_code == 0, r.output
    text = page.read_text()
    shown = html.unescape(text)
    assert "<title>SIMULATED: specguard sim" in shown and SIMULATED_BANNER in shown and "not a measurement" in shown
    assert json.loads(r.stdout)["rates"][0]["rate"] == 4.0  # stdout stays the JSON alone
    cli.guard.events.clear()
    cli.fails([*BASE, "--rate", "4", *DRAFT, "--html", page], USAGE, "--html: ")
    assert page.read_text() == text
    r = cli.invoke([*BASE, "--rate", "8", *DRAFT, "--html", page, "--force"])
    assert r.exit_code == 0, r.output
    assert page.read_text() != text


BAD = [
    ([*RATES, "--method", "ngram", "--acceptance", "0.8,x"], "--acceptance '0.8,x': expected comma-separated numbers"),
    ([*RATES, "--method", "ngram", "--acceptance", "0.8,1.2"], "--acceptance: each rate must lie in [0, 1]"),
    ([*RATES, "--method", "ngram", "--acceptance", "0.5,0.7"], "--acceptance: per-position rates must not increase"),
    ([*RATES, "--method", "ngram", "--acceptance", "nan"], "--acceptance: each rate must lie in [0, 1]"),
    ([*RATES, "--draft", "llama-3.2-1b"], "--draft, --acceptance and --num-speculative-tokens need --method"),
    ([*RATES, "--method", "draft_model"], "--method draft_model needs --draft"),
    (["--rate", "0"], "--rate: every --rate must be above 0"),
    (["--rate", "inf"], "--rate: expected a finite number"),
    (["--rate", "2", "--duration", "nan"], "--duration: expected a finite number"),
    (["--rate", "2", "--duration", "10", "--warmup", "10"], "--warmup 10 s must be shorter than --duration 10 s"),
    (["--rate", "2", "--burstiness", "0.5"], "--burstiness: only with --arrival gamma"),
    (["--rate", "2", "--arrival", "gamma", "--burstiness", "0"], "--burstiness: Input should be greater than 0"),
    (["--rate", "2", "--tp", "0"], "--tp: Input should be greater than or equal to 1"),
    (["--rate", "2", "--tp", "3"], "--tp 3:"),
    (["--rate", "2", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization: Input should be less than or equal to 1"),
    (["--rate", "2", "--crossover-metric", "p99"], "--crossover-metric: one of e2e_ms"),
    (["--rate", "2", "--vllm-version", "latest"], "--vllm-version 'latest': expected a vLLM version"),
    (["--rate", "2", "--method", "medusa"], "'--method'"),
    (["--rate", "2", "--profile", "missing.json"], "--profile missing.json: not found"),
    (["--rate", "2", "--method", "draft_model", "--draft", "no-such-model"], "--draft no-such-model: unknown model"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD, ids=[case_id(c) for c in BAD])
def test_bad_options_exit_2_naming_the_option_before_any_simulation(cli: Cli, args: list[str], fragment: str) -> None:
    cli.fails([*BASE, *args], USAGE, fragment)


def test_an_unknown_gpu_or_target_lists_the_catalog(cli: Cli) -> None:
    r = cli.fails(["sim", "run", "--target", "llama-3.1-8b", "--gpu", "h900", "--rate", "2"], USAGE, "--gpu h900: unknown GPU")
    assert "h100-80gb" in r.stderr
    r = cli.fails(["sim", "run", "--target", "llama-9", "--gpu", "h100-80gb", "--rate", "2"], USAGE, "--target llama-9: unknown")
    assert "qwen3-8b" in r.stderr


def test_a_bad_option_under_json_is_the_error_object(cli: Cli) -> None:
    cli.fails([*BASE, "--rate", "0", "--json"], USAGE, "--rate", as_json=True)


def test_the_method_choices_are_the_simulators() -> None:
    from typing import get_args

    assert tuple(m.value for m in SimMethodOption) == get_args(sim_run.SimMethod)


def test_calibrate_writes_a_profile_that_sim_run_uses_and_refuses_to_overwrite(cli: Cli, tmp_path: Path) -> None:
    from tests.unit.sim.synthetic_runs import TRUE, write_run

    runs = [write_run(tmp_path / "base", seed=1), write_run(tmp_path / "ngram", k=3, seed=2)]
    prof = tmp_path / "profile.json"
    r = cli.invoke(["sim", "calibrate", *map(str, runs), "--out", str(prof)])
    assert r.exit_code == 0, r.output
    saved = json.loads(prof.read_text())
    assert saved["schema_version"] == "specguard.sim_profile/1"
    assert saved["profile"]["fixed_s"] == pytest.approx(TRUE.fixed_s, rel=0.02)
    assert "fit error" in r.stdout and "baseline" in r.stdout and "speculative" in r.stdout
    again = cli.invoke(["sim", "calibrate", *map(str, runs), "--out", str(prof)])
    assert again.exit_code == USAGE and "--out" in again.output
    used = cli.invoke([*BASE, "--rate", "2", "--profile", str(prof), "--json"])
    assert used.exit_code == 0, used.output
    assert json.loads(used.stdout)["setup"]["step_model"].startswith("calibrated linear profile")


def test_a_broken_profile_is_refused_naming_the_file_and_key(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "profile.json"
    bad.write_text(json.dumps({"schema_version": "specguard.sim_profile/1", "profile": {"fixed_s": -1}}))
    r = cli.invoke([*BASE, "--rate", "2", "--profile", str(bad)])
    assert r.exit_code == USAGE and str(bad) in r.output and "fixed_s" in r.output
    assert "Traceback" not in r.output


# --- lengths and acceptance from files, vLLM's per-GPU scheduler defaults -------------------------------------

PLAIN = ["sim", "run", "--target", "llama-3.1-8b", "--gpu", "h100-80gb", "--duration", "30", "--rate", "4"]


@pytest.fixture(scope="module")
def spec_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.unit.sim.synthetic_runs import write_run

    return write_run(tmp_path_factory.mktemp("sim-inputs") / "run", k=3, requests=40, seed=5, per_position_counters=True)


def test_lengths_and_acceptance_from_a_bench_run(cli: Cli, spec_run: Path) -> None:
    from specguard.sim.from_run import run_workload

    r = cli.invoke([*PLAIN, "--method", "ngram", "--lengths-from", spec_run, "--acceptance-from", spec_run, "--json"])
    assert r.exit_code == 0, r.output
    setup = json.loads(r.stdout)["setup"]
    work = run_workload(spec_run)
    assert f"40 requests of bench run {spec_run}" in setup["workload"]
    assert work.acceptance is not None and setup["acceptance"] == pytest.approx(work.acceptance)
    assert setup["num_speculative_tokens"] == 3 and setup["acceptance_source"].startswith(f"bench run {spec_run}")


def test_k_against_the_measured_positions_is_reported(cli: Cli, spec_run: Path) -> None:
    more = cli.invoke([*PLAIN, "--method", "ngram", "--acceptance-from", spec_run, "--num-speculative-tokens", "5", "--json"])
    assert more.exit_code == 0, more.output
    doc = json.loads(more.stdout)
    beyond = [w for w in doc["warnings"] if "--num-speculative-tokens 5 is beyond the 3 positions" in w]
    assert beyond and "positions 4-5 are extrapolated" in beyond[0]
    fewer = cli.invoke([*PLAIN, "--method", "ngram", "--acceptance-from", spec_run, "--num-speculative-tokens", "2"])
    assert fewer.exit_code == 0, fewer.output
    assert "the first 2 of the 3 positions measured in" in fewer.stdout


FROM_FILES_BAD = [
    (["--lengths-from", "RUN", "--prompt-len", "100"], "--lengths-from and --prompt-len"),
    (["--lengths-from", "RUN", "--output-len", "100"], "--lengths-from and --output-len"),
    (["--method", "ngram", "--acceptance-from", "RUN", "--acceptance", "0.5"], "--acceptance-from and --acceptance"),
    (["--acceptance-from", "RUN"], "--acceptance-from needs --method"),
    (["--lengths-from", "missing-dir"], "--lengths-from missing-dir: not found"),
    (["--tokenizer", "tok"], "--tokenizer: only with --lengths-from"),
]


@pytest.mark.parametrize(("args", "fragment"), FROM_FILES_BAD, ids=[case_id(c) for c in FROM_FILES_BAD])
def test_file_options_and_the_options_they_exclude_exit_2(cli: Cli, spec_run: Path, args: list[str], fragment: str) -> None:
    cli.fails([*PLAIN, *[str(spec_run) if a == "RUN" else a for a in args]], USAGE, fragment)


def test_a_prompt_file_needs_output_len_and_takes_it(cli: Cli, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "red", "green", "blue"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": " ".join(words[1:] * n)}) + "\n" for n in (1, 2)))
    cli.fails([*PLAIN, "--lengths-from", prompts, "--tokenizer", tmp_path / "tok"], USAGE, "give --output-len L")
    r = cli.invoke([*PLAIN, "--lengths-from", str(prompts), "--tokenizer", str(tmp_path / "tok"), "--output-len", "64", "--json"])
    assert r.exit_code == 0, r.output
    assert "prompt lengths of the 2 lines" in json.loads(r.stdout)["setup"]["workload"]


@pytest.mark.parametrize("gpu", ["h100-80gb", "l40s"])
def test_unset_scheduler_limits_are_vllms_defaults_for_the_gpu(cli: Cli, gpu: str) -> None:
    from specguard.vllm.knowledge import default_scheduler_limits

    args = ["sim", "run", "--target", "llama-3.1-8b", "--gpu", gpu, "--duration", "20", "--rate", "2"]
    setup = json.loads(cli.invoke([*args, "--json"]).stdout)["setup"]
    assert (setup["max_num_seqs"], setup["max_num_batched_tokens"]) == default_scheduler_limits(gpu)
    assert setup["scheduler_defaults"] == f"max_num_seqs and max_num_batched_tokens: vLLM's default on {gpu}"
    given = json.loads(cli.invoke([*args, "--max-num-seqs", "64", "--json"]).stdout)["setup"]
    assert given["max_num_seqs"] == 64 and given["max_num_batched_tokens"] == default_scheduler_limits(gpu)[1]
    assert given["scheduler_defaults"] == f"max_num_batched_tokens: vLLM's default on {gpu}"
    table = cli.invoke(args).stdout
    seqs, tokens = default_scheduler_limits(gpu)
    assert f"max_num_seqs {seqs}, max_num_batched_tokens {tokens}" in table


def test_an_unknown_gpu_is_not_told_of_an_option_sim_lacks(cli: Cli) -> None:
    r = cli.fails(["sim", "run", "--target", "llama-3.1-8b", "--gpu", "h900", "--rate", "2"], USAGE, "--gpu h900: unknown GPU")
    assert "--gpu-memory-gib" not in r.stderr


def test_the_readmes_sim_run_lines_run_on_the_files_they_name(cli: Cli) -> None:
    """Each ``specguard sim run`` line of docs/sim.md, in a directory holding what it names (shortened to 20 s)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from specguard.workload.assess import assess
    from tests.system.test_readme import page_commands
    from tests.unit.sim.synthetic_runs import write_run
    from tests.unit.workload.test_workload import IdTokenizer

    lines = [c for c in page_commands("sim.md") if c[:3] == ["specguard", "sim", "run"]]
    assert len(lines) >= 4
    write_run(Path("runs/ngram"), k=3, requests=40, seed=6, per_position_counters=True)
    log = Path("log.jsonl")
    entry = {"schema_version": "specguard.request_log/1", "endpoint": "completions", "sampling": {"temperature": 0}}
    rows = [{**entry, "prompt": "a b c d " * (i + 2), "response": {"text": "a b c d " * (i + 1)}} for i in range(12)]
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    Path("assess.json").write_text(assess(log, IdTokenizer(), "ids", sweep=False, suffix=False).model_dump_json())
    Path("prompts.jsonl").write_text("".join(json.dumps({"prompt": "red green " * n}) + "\n" for n in (1, 3)))
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "red": 1, "green": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    Path("tokenizer").mkdir()
    tok.save("tokenizer/tokenizer.json")
    for line in lines:
        r = cli.invoke([*line[1:], "--duration", "20"])
        assert r.exit_code == 0, (line, r.output)


def test_trace_arrivals_from_a_bench_run_and_from_a_request_log(cli: Cli, spec_run: Path, tmp_path: Path) -> None:
    from specguard.sim.inputs import arrivals_from

    r = cli.invoke([*PLAIN, "--arrival", "trace", "--arrivals-from", str(spec_run), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["setup"]["arrivals"] == "trace"
    assert any(f"send times of the 40 requests of {spec_run}" in w for w in doc["warnings"])
    # a log whose requests come in two bursts a minute apart: the trace keeps the bursts
    stamps = [f"2026-11-29T10:00:{s:02d}Z" for s in (0, 0, 1, 1)] + [f"2026-11-29T10:01:{s:02d}Z" for s in (0, 0, 1, 1)]
    log = tmp_path / "log.jsonl"
    line = {"schema_version": "specguard.request_log/1", "endpoint": "completions", "prompt": "hi"}
    log.write_text("".join(json.dumps({**line, "timestamp": t}) + "\n" for t in stamps))
    offsets, what = arrivals_from(log)
    assert offsets == [0.0, 0.0, 1.0, 1.0, 60.0, 60.0, 61.0, 61.0] and "8 timestamped lines" in what
    r = cli.invoke([*PLAIN, "--arrival", "trace", "--arrivals-from", str(log), "--json"])
    assert r.exit_code == 0, r.output


TRACE_BAD = [
    (["--arrival", "trace"], "--arrival trace and --arrivals-from PATH go together"),
    (["--arrivals-from", "RUN"], "--arrival trace and --arrivals-from PATH go together"),
    (["--arrival", "trace", "--arrivals-from", "missing"], "--arrivals-from missing: not found"),
]


@pytest.mark.parametrize(("args", "fragment"), TRACE_BAD, ids=[case_id(c) for c in TRACE_BAD])
def test_trace_options_exit_2_before_any_simulation(cli: Cli, spec_run: Path, args: list[str], fragment: str) -> None:
    cli.fails([*PLAIN, *[str(spec_run) if a == "RUN" else a for a in args]], USAGE, fragment)


def test_a_closed_loop_run_is_no_arrival_trace(cli: Cli, tmp_path: Path) -> None:
    from tests.unit.sim.synthetic_runs import write_run

    run = write_run(tmp_path / "run", requests=10)
    info = json.loads((run / "run.json").read_text())
    info["load"] = {**info["load"], "kind": "concurrency", "concurrency": 2, "rate": None}
    (run / "run.json").write_text(json.dumps(info))
    cli.fails([*PLAIN, "--arrival", "trace", "--arrivals-from", str(run)], USAGE, "sends when a slot frees")
