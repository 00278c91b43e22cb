"""`specguard embedded install/models/serve` and the root group: option errors that stop before anything runs.

The guard refuses any runtime install, model build, child process or connection, and the test checks
that nothing appeared under SPECGUARD_HOME or the working directory.
"""

from __future__ import annotations

import pytest

from tests.cli.helpers import GE1, USAGE, Cli, case_id, int_fuzz

CASES = [
    (["embedded", "serve", "--method", "nope"], USAGE, "'--method'"),
    (["embedded", "serve", "--method", ""], USAGE, "'--method'"),
    *[(["embedded", "serve", *args], code, frag) for args, code, frag in int_fuzz("--port")],
    (["embedded", "serve", "--port", "0"], USAGE, f"'--port': Input should be {GE1}"),
    (["embedded", "serve", "--port", "65536"], USAGE, "'--port': Input should be less than or equal to 65535"),
    (["embedded", "serve", "--port", "1.5"], USAGE, "valid integer"),
    (["embedded", "serve", "--port"], USAGE, "'--port' requires an argument"),
    (["embedded", "serve", "--unknown-option"], USAGE, "No such option: --unknown-option"),
    (["embedded", "serve", "extra"], USAGE, "unexpected extra argument"),
    (["embedded", "install", "--vllm-version", "banana"], USAGE, "--vllm-version 'banana': expected a vLLM version"),
    (["embedded", "install", "--vllm-version", ""], USAGE, "--vllm-version '': expected a vLLM version"),
    (["embedded", "install", "--vllm-version", "0.32.0/../../elsewhere"], USAGE, "expected a vLLM version"),
    (["embedded", "install", "--vllm-version", "0.32.0 --pre"], USAGE, "expected a vLLM version"),
    (["embedded", "install", "--version"], USAGE, "'--version' requires an argument"),
    (["embedded", "install", "--unknown-option"], USAGE, "No such option: --unknown-option"),
    (["embedded", "models", "--unknown-option"], USAGE, "No such option: --unknown-option"),
    (["embedded", "models", "extra"], USAGE, "unexpected extra argument"),
    (["embedded", "nope"], USAGE, "No such command 'nope'"),
    (["nope"], USAGE, "No such command 'nope'"),
    (["--unknown-option"], USAGE, "No such option: --unknown-option"),
]


@pytest.mark.parametrize(("args", "code", "fragment"), CASES, ids=[case_id(c) for c in CASES])
def test_bad_option(cli: Cli, args: list[str], code: int, fragment: str) -> None:
    cli.fails(args, code, fragment)


def test_no_command_shows_help(cli: Cli) -> None:
    r = cli.invoke(["embedded"])
    assert r.exit_code == USAGE and "Traceback" not in r.output
    assert "install" in r.output and "serve" in r.output
    assert cli.guard.events == []


def test_version(cli: Cli) -> None:
    r = cli.ok(["--version"])
    assert r.stdout.strip()
