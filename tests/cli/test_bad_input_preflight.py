"""`specguard preflight` with specguard's rules only (--vllm-version): bad input is exit 2 and a JSON error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import BAD_FILES, GE1, USAGE, Cli, bad_file, case_id, int_fuzz

BASE = ["preflight", "--vllm-version", "0.32.0", "--json"]
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4}'

CASES = [
    *int_fuzz("--tp"),
    *int_fuzz("--max-model-len"),
    (["--tp", "0"], USAGE, f"'--tp': Input should be {GE1}"),
    (["--max-model-len", "0"], USAGE, f"'--max-model-len': Input should be {GE1}"),
    (["--vllm-version", "banana"], USAGE, "--vllm-version 'banana': expected a vLLM version"),
    (["--vllm-version", ""], USAGE, "--vllm-version '': expected a vLLM version"),
    (["--vllm-version", " "], USAGE, "expected a vLLM version"),
    (["--vllm-version", "0.32.0/../x"], USAGE, "expected a vLLM version"),
    (["--config", "{bad"], USAGE, "--config: line 1, column 2: not JSON"),
    (["--config", "[1]"], USAGE, "--config: expected a JSON object, got list"),
    (["--config", ""], USAGE, "--config: expected a value"),
    (["--config", "   "], USAGE, "--config: expected a value"),
    (["--command", ""], USAGE, "--command: expected a value"),
    (["--command", "echo hi there"], USAGE, "--command: no vLLM server invocation found"),
    (["--url", "ftp://x"], USAGE, "--url ftp://x: expected http(s)://host[:port]"),
    (["--url", "localhost:8000"], USAGE, "--url localhost:8000: expected http(s)://host[:port]"),
    (["--url", "http://h:0"], USAGE, "--url http://h:0: port 0"),
    (["--url", "http://h:99999"], USAGE, "--url http://h:99999: not a URL"),
    (["--url", "http://u:p@h:1"], USAGE, "credentials do not go in a URL"),
    (["--url", "http://h:1/?q=1"], USAGE, "without query"),
    (["--api-key-env", "SPECGUARD_TEST_UNSET_VAR"], USAGE, "--api-key-env SPECGUARD_TEST_UNSET_VAR: the variable is not set"),
    (["--unknown-option"], USAGE, "No such option: --unknown-option"),
]


@pytest.mark.parametrize(("extra", "code", "fragment"), CASES, ids=[case_id(c) for c in CASES])
def test_bad_option(cli: Cli, extra: list[str], code: int, fragment: str) -> None:
    cli.fails([*BASE, *extra], code, fragment, as_json=True)


@pytest.mark.parametrize("option", ["--config", "--command"])
@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_file(cli: Cli, tmp_path: Path, option: str, kind: str) -> None:
    path = bad_file(tmp_path, kind, "spec.txt")
    cli.fails([*BASE, option, path], USAGE, f"{path}: ", as_json=True)
    r = cli.fails([*BASE, option, path], USAGE, BAD_FILES[kind][1], as_json=True)
    assert "file file" not in r.stderr


def test_config_file_that_is_a_list(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text("[1, 2]")
    cli.fails([*BASE, "--config", path], USAGE, f"{path}: expected a JSON object, got list", as_json=True)


def test_config_file_that_is_not_json(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text("method: ngram\n")
    cli.fails([*BASE, "--config", path], USAGE, f"{path}: line 1", as_json=True)


@pytest.mark.parametrize("option", ["--python", "--vllm-bin"])
def test_interpreter_not_found(cli: Cli, tmp_path: Path, option: str) -> None:
    cli.fails([*BASE, option, tmp_path / "nope"], USAGE, f"{option} {tmp_path / 'nope'}: not found", as_json=True)


@pytest.mark.parametrize("option", ["--python", "--vllm-bin"])
def test_interpreter_is_a_directory(cli: Cli, tmp_path: Path, option: str) -> None:
    cli.fails([*BASE, option, tmp_path], USAGE, f"{option} {tmp_path}: is a directory", as_json=True)


def test_target_not_found(cli: Cli, tmp_path: Path) -> None:
    cli.fails([*BASE, "--config", NGRAM, "--target", tmp_path / "nope"], USAGE, "--target", as_json=True)
    cli.fails([*BASE, "--config", NGRAM, "--target", tmp_path / "nope"], USAGE, "not found", as_json=True)


def test_target_is_a_file(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    cli.fails([*BASE, "--config", NGRAM, "--target", path], USAGE, f"--target {path}: not a directory", as_json=True)


@pytest.mark.parametrize(("config", "code"), [(NGRAM, 0), ('{"method": "ngram", "num_speculative_tokens": 0}', 1)])
def test_rules_only_verdicts(cli: Cli, config: str, code: int) -> None:
    """The rules answer (0 accepted, 1 rejected) with valid options at their lowest values; nothing is probed."""
    r = cli.ok([*BASE, "--config", config, "--tp", "1", "--max-model-len", "1"], code)
    report = json.loads(r.stdout)
    assert report["version"] == "0.32.0" and report["checked_by"] == ["specguard-rules"]


def test_python_given_by_name_is_looked_up_on_path(cli: Cli) -> None:
    """A bare interpreter name is not a missing file: it is asked (here the guard refuses the child process)."""
    r = cli.invoke([*BASE, "--python", "python3"])
    assert "not found" not in r.stderr and "Traceback" not in r.output
    assert cli.guard.events == ["subprocess"]
