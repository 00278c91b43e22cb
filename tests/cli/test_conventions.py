"""Conventions operators expect (issue 29): shell completion, flags without a type, one name per concept (the old
name a hidden alias), the OpenAI SDK's variables wherever a server or key is taken, and --json on every command that
prints results, with the same {"error": ...} on failure."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specguard.cli.app import app
from specguard.cli.renamed import RENAMED
from specguard.errors import ExitCode
from tests.cli.helpers import DEAD, USAGE, Cli, plan_data, write_plan


def _help(*sub: str) -> str:
    r = CliRunner().invoke(app, [*sub, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.stdout


def _has_option(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def test_completion_is_installed_shown_and_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    root = _help()
    assert _has_option(root, "--install-completion") and _has_option(root, "--show-completion")
    # typer detects the shell from the process tree (shellingham), not $SHELL: under `make test-fast` the parent is
    # make's /bin/sh, which typer does not support ("Shell sh not supported"), so the test says the shell is bash
    import typer.completion

    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    script = runner.invoke(app, ["--show-completion"], prog_name="specguard")
    assert script.exit_code == 0 and "_SPECGUARD_COMPLETE=complete_bash" in script.stdout, script.output
    # what the script asks: the words so far, answered with the commands and options that fit
    env = {"_SPECGUARD_COMPLETE": "complete_bash", "COMP_WORDS": "specguard can", "COMP_CWORD": "1"}
    assert runner.invoke(app, [], env=env, prog_name="specguard").stdout.split() == ["canary"]
    env = {"_SPECGUARD_COMPLETE": "complete_bash", "COMP_WORDS": "specguard bench --ur", "COMP_CWORD": "2"}
    assert runner.invoke(app, [], env=env, prog_name="specguard").stdout.split() == ["--url"]


@pytest.mark.parametrize("sub", [(), ("canary", "run"), ("bench",), ("embedded", "install"), ("check",), ("demo",)])
def test_no_flag_shows_a_type_in_help(sub: tuple[str, ...]) -> None:
    text = _help(*sub)
    assert "<bool>" not in text and _has_option(text, "--help")


@pytest.mark.parametrize(("command", "old", "new"), [(c, o, n) for c, names in RENAMED.items() for o, n in names.items()])
def test_a_renamed_option_is_in_help_under_its_new_name_only(command: str, old: str, new: str) -> None:
    text = _help(*command.split())
    assert _has_option(text, new) and not _has_option(text, old), text


def test_both_spellings_work_the_old_one_with_a_warning(cli: Cli, tmp_path: Path) -> None:
    bench = ["bench", "--model", "m", "--prompts", "synthetic:random", "--out", tmp_path / "run"]
    for name in ("--url", "--base-url"):
        r = cli.fails([*bench, name, "ftp://x"], USAGE, "--url ftp://x: expected http(s)://host[:port]")
        assert ("warning: --base-url is now --url" in r.stderr) == (name == "--base-url"), r.stderr
    cli.fails([*bench, "--url", DEAD, "--base-url", DEAD], USAGE, "--base-url is the old name of --url: give --url only")
    for name in ("--vllm-version", "--version"):
        cli.fails(["embedded", "install", name, "banana"], USAGE, "--vllm-version 'banana': expected a vLLM version")
    for name in ("--vllm-bin", "--vllm"):
        cli.fails(["preflight", name, tmp_path / "nope"], USAGE, f"--vllm-bin {tmp_path / 'nope'}: not found")
    log = tmp_path / "log.jsonl"
    log.write_text('{"prompt_token_ids": [1, 2, 3], "output_token_ids": [4]}\n')
    assess = ["assess", log, "--url", DEAD, "--write-plan", tmp_path / "next", "--requests-out", tmp_path / "no/r.jsonl"]
    cli.fails(assess, USAGE, "--write-plan needs --target (")
    for name in ("--target", "--target-model"):  # the model is taken: the check after it fails
        cli.fails([*assess, name, "m"], USAGE, "--requests-out")


def test_openai_base_url_and_key_are_read_wherever_a_server_is(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import specguard.sizing.run as sizing_run
    from specguard.errors import ServerError

    asked: list[tuple[Any, ...]] = []

    def inspect(url: str, api_key: str | None) -> None:
        asked.append((url, api_key))
        raise ServerError(f"{url}: not reachable (test)")

    monkeypatch.setattr(sizing_run, "inspect_server", inspect)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    r = cli.invoke(["plan", "--target", "qwen3-8b", "--gpu", "h100-80gb"])
    assert r.exit_code == ExitCode.RUNTIME_FAILURE and asked == [("http://127.0.0.1:9/v1", "sk-from-env")], r.output
    monkeypatch.setenv("MY_KEY", "sk-named")
    asked.clear()
    cli.invoke(["plan", "--target", "qwen3-8b", "--gpu", "h100-80gb", "--url", DEAD, "--api-key-env", "MY_KEY"])
    assert asked == [(DEAD, "sk-named")]  # the options win over the variables
    # a bad variable is refused at the edge, naming it
    monkeypatch.setenv("OPENAI_BASE_URL", "ftp://x")
    cli.fails(["preflight", "--vllm-version", "0.32.0"], USAGE, "OPENAI_BASE_URL ftp://x: expected http(s)://host[:port]")
    cli.fails(["inventory"], USAGE, "OPENAI_BASE_URL ftp://x")
    log = tmp_path / "log.jsonl"
    log.write_text('{"prompt_token_ids": [1, 2, 3], "output_token_ids": [4]}\n')
    cli.fails(["assess", log], USAGE, "OPENAI_BASE_URL ftp://x")
    monkeypatch.delenv("OPENAI_BASE_URL")
    cli.fails(["inventory"], USAGE, "give --url (a running server)")  # without it, the same message as before


@pytest.mark.parametrize(
    "sub", [("bench",), ("check",), ("report",), ("demo",), ("canary", "run"), ("canary", "pause"), ("canary", "rollback")]
)
def test_every_command_printing_results_has_json(sub: tuple[str, ...]) -> None:
    assert _has_option(_help(*sub), "--json")


def test_check_and_report_json_and_their_errors(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml", plan_data())
    r = cli.ok(["check", plan, "--out", tmp_path / "c", "--dry-run", "--json"])
    assert json.loads(r.stdout)["plan"]
    cli.fails(["check", tmp_path / "missing.yaml", "--out", tmp_path / "c", "--json"], USAGE, "not found", as_json=True)
    cli.fails(["report", tmp_path / "missing", "--json"], USAGE, "not found", as_json=True)
    cli.fails(["canary", "run", tmp_path / "missing.yaml", "--json"], USAGE, "not found", as_json=True)


def test_report_json_is_the_verdict_document(cli: Cli, tmp_path: Path) -> None:
    from tests.unit.report.test_report import make_check

    _, out = make_check(tmp_path / "c")
    r = cli.invoke(["report", out, "--json"])
    verdict = json.loads(r.stdout)
    assert r.exit_code == verdict["exit_code"] and verdict == json.loads((out / "verdict.json").read_text())


def test_the_demo_names_the_meaning_of_the_checks_exit_code_not_every_commands() -> None:
    from specguard.cli.check import check_exit_line
    from specguard.report.model.data import VerdictFile

    fields = {"verdict": "NO-GO", "exit_code": 1, "objective": "p95 itl_ms", "reasons": [], "plan": "p"}
    line = check_exit_line(VerdictFile.model_construct(**fields))
    assert line == "verdict exit code: 1 (NO-GO): 'specguard check' on this plan exits 1"
    assert "rejected" not in line and "diff" not in line


def test_demo_json_prints_the_verdict_and_says_the_exit_line_on_stderr(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import specguard.demo as demo
    from specguard.check.report import write_outputs
    from tests.unit.report.test_report import make_check

    record, out = make_check(tmp_path / "c")
    monkeypatch.setattr(demo, "run_demo", lambda out, **kw: write_outputs(record, out))  # the measuring is the system tier's
    r = cli.ok(["demo", "--out", out, "--json"])
    verdict = json.loads(r.stdout)
    assert verdict == json.loads((out / "verdict.json").read_text())
    assert f"verdict exit code: {verdict['exit_code']} ({verdict['verdict']})" in r.stderr


def test_a_partial_report_in_json_says_where_it_is_and_that_there_is_no_verdict(cli: Cli, tmp_path: Path) -> None:
    from tests.cli.helpers import make_check_dir

    d = make_check_dir(tmp_path / "d", complete=False)
    r = cli.ok(["report", d, "--partial", "--json"], int(ExitCode.INCONCLUSIVE))
    doc = json.loads(r.stdout)
    assert doc["verdict"] is None and Path(doc["partial_report"]).is_file()
