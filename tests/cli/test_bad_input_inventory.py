"""`specguard inventory` and `inventory diff`: bad sources, targets and inventories are exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import BAD_FILES, DEAD, USAGE, Cli, bad_file, case_id, plan_data, write_plan

COMMAND = 'vllm serve m --speculative-config {"method":"ngram","num_speculative_tokens":4}'


def base(out: Path) -> list[str]:
    return ["inventory", "--out", str(out)]


CASES = [
    ([], USAGE, "give --url (a running server), --command (its launch line) or --plan with --arm"),
    (["--url", "ftp://x"], USAGE, "--url ftp://x: expected http(s)://host[:port]"),
    (["--url", "localhost:8000"], USAGE, "--url localhost:8000: expected http(s)://host[:port]"),
    (["--url", "http://h:0"], USAGE, "--url http://h:0: port 0"),
    (["--url", "http://h:99999"], USAGE, "not a URL"),
    (["--url", "http://u:p@h:1"], USAGE, "credentials do not go in a URL"),
    (
        ["--url", DEAD, "--api-key-env", "SPECGUARD_TEST_UNSET_VAR"],
        USAGE,
        "--api-key-env SPECGUARD_TEST_UNSET_VAR: the variable is not set",
    ),
    (["--command", ""], USAGE, "--command: expected a value"),
    (["--command", "echo hi there"], USAGE, "--command: no vLLM server invocation found"),
    (["--command", COMMAND, "--config", "{bad"], USAGE, "--config: line 1, column 2: not JSON"),
    (["--command", COMMAND, "--config", ""], USAGE, "--config: expected a value"),
    (["--command", COMMAND, "--arm", "baseline"], USAGE, "--arm goes with --plan"),
    (["--command", COMMAND, "--arm", "nope"], USAGE, "'--arm'"),
    (["--plan", "plan.yaml"], USAGE, "--plan needs --arm baseline or --arm candidate"),
    (["--unknown-option"], USAGE, "No such option: --unknown-option"),
]


@pytest.mark.parametrize(("extra", "code", "fragment"), CASES, ids=[case_id(c) for c in CASES])
def test_bad_option(cli: Cli, tmp_path: Path, extra: list[str], code: int, fragment: str) -> None:
    cli.fails([*base(tmp_path / "inventory.json"), *extra], code, fragment)


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_command_file(cli: Cli, tmp_path: Path, kind: str) -> None:
    path = bad_file(tmp_path, kind, "unit.service")
    cli.fails([*base(tmp_path / "inventory.json"), "--command", path], USAGE, f"{path}: ")
    r = cli.fails([*base(tmp_path / "inventory.json"), "--command", path], USAGE, BAD_FILES[kind][1])
    assert "file file" not in r.stderr


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_plan_file(cli: Cli, tmp_path: Path, kind: str) -> None:
    path = bad_file(tmp_path, kind, "plan.yaml")
    cli.fails([*base(tmp_path / "inventory.json"), "--plan", path, "--arm", "baseline"], USAGE, f"{path}: ")
    cli.fails([*base(tmp_path / "inventory.json"), "--plan", path, "--arm", "baseline"], USAGE, BAD_FILES[kind][1])


def test_plan_that_is_not_valid(cli: Cli, tmp_path: Path) -> None:
    data = plan_data()
    data["arms"]["baseline"]["endpoint"]["base_url"] = "ftp://x"
    path = write_plan(tmp_path / "plan.yaml", data)
    cli.fails([*base(tmp_path / "inventory.json"), "--plan", path, "--arm", "baseline"], USAGE, f"{path}:")


def test_out_exists(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "inventory.json"
    target.write_text("keep me")
    cli.fails([*base(target), "--command", COMMAND], USAGE, f"--out: {target} already exists; pass --force")
    assert target.read_text() == "keep me"


def test_default_out_exists(cli: Cli) -> None:
    Path("inventory.json").write_text("keep me")
    cli.fails(["inventory", "--command", COMMAND], USAGE, "inventory.json already exists; pass --force")
    assert Path("inventory.json").read_text() == "keep me"


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_out_is_a_directory(cli: Cli, tmp_path: Path, force: list[str]) -> None:
    (tmp_path / "inv").mkdir()
    cli.fails([*base(tmp_path / "inv"), "--command", COMMAND, *force], USAGE, f"{tmp_path / 'inv'}")


def test_out_in_a_missing_directory(cli: Cli, tmp_path: Path) -> None:
    cli.fails([*base(tmp_path / "no" / "inventory.json"), "--command", COMMAND], USAGE, "does not exist")


def test_run_not_found(cli: Cli, tmp_path: Path) -> None:
    cli.fails(
        [*base(tmp_path / "inventory.json"), "--command", COMMAND, "--run", tmp_path / "nope"], USAGE, "run directory not found"
    )


def test_run_that_is_not_a_run(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    cli.fails([*base(tmp_path / "inventory.json"), "--command", COMMAND, "--run", tmp_path / "run"], USAGE, "run.json")


def test_command_is_recorded(cli: Cli, tmp_path: Path) -> None:
    cli.ok([*base(tmp_path / "inventory.json"), "--command", COMMAND])
    assert json.loads((tmp_path / "inventory.json").read_text())["source"]


# --- inventory diff ----------------------------------------------------------------------------


@pytest.fixture
def inventory(cli: Cli, tmp_path: Path) -> Path:
    path = tmp_path / "good.json"
    cli.ok(["inventory", "--out", path, "--command", COMMAND])
    return path


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_diff_bad_file(cli: Cli, tmp_path: Path, inventory: Path, kind: str, side: str) -> None:
    bad = bad_file(tmp_path, kind, "inventory.json")
    pair = [bad, inventory] if side == "a" else [inventory, bad]
    cli.fails(["inventory", "diff", *pair, "--json"], USAGE, f"{bad}: ", as_json=True)
    r = cli.fails(["inventory", "diff", *pair, "--json"], USAGE, BAD_FILES[kind][1], as_json=True)
    assert "a inventory" not in r.stderr


@pytest.mark.parametrize("text", ["{bad", "[1]", "{}", '{"specguard_version": 1}'])
def test_diff_not_an_inventory(cli: Cli, tmp_path: Path, inventory: Path, text: str) -> None:
    bad = tmp_path / "other.json"
    bad.write_text(text)
    cli.fails(["inventory", "diff", inventory, bad, "--json"], USAGE, f"{bad}: not a specguard inventory", as_json=True)


def test_diff_missing_argument(cli: Cli, inventory: Path) -> None:
    cli.fails(["inventory", "diff", inventory, "--json"], USAGE, "Missing argument", as_json=True)


def test_diff_identical(cli: Cli, inventory: Path) -> None:
    r = cli.ok(["inventory", "diff", inventory, inventory, "--json"])
    assert json.loads(r.stdout)["differences"] == []
