"""`specguard sim run` in-process: the JSON contract, the table, the HTML report, and bad options refused before any
simulated step (exit 2, one line naming the option, no traceback)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

import specguard.sim.run as sim_run
from specguard.cli_sim import SimMethodOption
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
