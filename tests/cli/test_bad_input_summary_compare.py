"""`specguard summary` and `compare`: a run directory that is missing, not a run or damaged is exit 2, as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import BAD_FILES, USAGE, Cli, bad_file, case_id, int_fuzz, make_run

DAMAGE = ["empty", "whitespace", "bom", "binary", "utf16"]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return make_run(tmp_path / "good")


def damaged(tmp_path: Path, good: Path, name: str, kind: str) -> Path:
    """A copy of the good run with ``name`` replaced by a file of ``kind``."""
    d = make_run(tmp_path / f"{kind}-{name.replace('.', '-')}")
    content, _ = BAD_FILES[kind]
    (d / name).write_bytes(content or b"")
    return d


def not_runs(tmp_path: Path) -> list[tuple[Path, str]]:
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "a-file").write_text("x")
    only_requests = make_run(tmp_path / "only-requests")
    (only_requests / "run.json").unlink()
    return [
        (tmp_path / "missing", "run directory not found"),
        (tmp_path / "a-file", "not a directory"),
        (tmp_path / "empty-dir", str(tmp_path / "empty-dir")),
        (only_requests, str(only_requests / "run.json")),
    ]


# --- summary ----------------------------------------------------------------------------------------


def test_summary_not_a_run(cli: Cli, tmp_path: Path) -> None:
    for path, fragment in not_runs(tmp_path):
        cli.fails(["summary", path, "--json"], USAGE, fragment, as_json=True)


@pytest.mark.parametrize("name", ["run.json", "summary.json"])
@pytest.mark.parametrize("kind", DAMAGE)
def test_summary_damaged_file(cli: Cli, tmp_path: Path, good: Path, name: str, kind: str) -> None:
    d = damaged(tmp_path, good, name, kind)
    cli.fails(["summary", d, "--json"], USAGE, f"{d / name}: ", as_json=True)
    cli.fails(["summary", d, "--json"], USAGE, BAD_FILES[kind][1], as_json=True)


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("summary.json", '{"a": 1}', "key 'requests'"),
        ("summary.json", "[1]", "summary.json: "),
        ("requests.jsonl", '{"x": 1}\n{"x": 1}\n', "requests.jsonl:1: key 'index'"),
    ],
)
def test_summary_not_a_record(cli: Cli, tmp_path: Path, good: Path, name: str, text: str, fragment: str) -> None:
    (good / name).write_text(text)
    if name == "requests.jsonl":
        (good / "summary.json").unlink(missing_ok=True)
    cli.fails(["summary", good, "--json"], USAGE, fragment, as_json=True)


def test_summary_recomputed(cli: Cli, good: Path) -> None:
    r = cli.ok(["summary", good, "--json"])
    assert json.loads(r.stdout)["requests"] == 3


def test_summary_missing_argument(cli: Cli) -> None:
    cli.fails(["summary", "--json"], USAGE, "Missing argument", as_json=True)


# --- compare ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_compare_not_a_run(cli: Cli, tmp_path: Path, good: Path, side: str) -> None:
    for path, fragment in not_runs(tmp_path):
        pair = [path, good] if side == "baseline" else [good, path]
        cli.fails(["compare", *pair, "--json"], USAGE, fragment, as_json=True)


@pytest.mark.parametrize("side", ["baseline", "candidate"])
@pytest.mark.parametrize("kind", DAMAGE)
def test_compare_damaged_run_json(cli: Cli, tmp_path: Path, good: Path, kind: str, side: str) -> None:
    d = damaged(tmp_path, good, "run.json", kind)
    pair = [d, good] if side == "baseline" else [good, d]
    cli.fails(["compare", *pair, "--json"], USAGE, f"{d / 'run.json'}: ", as_json=True)
    cli.fails(["compare", *pair, "--json"], USAGE, BAD_FILES[kind][1], as_json=True)


SEED_CASES = int_fuzz("--seed", minimum=0)


@pytest.mark.parametrize(("extra", "code", "fragment"), SEED_CASES, ids=[case_id(c) for c in SEED_CASES])
def test_compare_bad_seed(cli: Cli, good: Path, tmp_path: Path, extra: list[str], code: int, fragment: str) -> None:
    cli.fails(["compare", good, make_run(tmp_path / "other"), "--json", *extra], code, fragment, as_json=True)


def test_compare_runs_that_differ(cli: Cli, good: Path, tmp_path: Path) -> None:
    r = cli.fails(
        ["compare", good, make_run(tmp_path / "hot", temperature=0.7), "--json"], USAGE, "refusing to compare", as_json=True
    )
    assert json.loads(r.stdout)["error"]["details"]["differences"]


def test_compare_seed_zero_is_accepted(cli: Cli, good: Path, tmp_path: Path) -> None:
    r = cli.ok(["compare", good, make_run(tmp_path / "other"), "--json", "--seed", "0"])
    assert json.loads(r.stdout)["comparable"] is True


def test_compare_missing_argument(cli: Cli, good: Path) -> None:
    cli.fails(["compare", good, "--json"], USAGE, "Missing argument", as_json=True)


def test_compare_bad_file_kinds_are_named(cli: Cli, tmp_path: Path, good: Path) -> None:
    """A file given where a run directory is expected."""
    path = bad_file(tmp_path, "bom", "run")
    cli.fails(["compare", good, path, "--json"], USAGE, f"{path}: not a directory", as_json=True)


@pytest.mark.parametrize("name", ["run.json", "summary.json"])
def test_a_long_damaged_file_is_one_short_line(cli: Cli, good: Path, name: str) -> None:
    """The error names the file and where the JSON breaks; it does not echo the file back."""
    (good / name).write_text('{"requests": ' + "9" * 5000 + ",,}")
    r = cli.fails(["summary", good, "--json"], USAGE, f"{good / name}: Invalid JSON", as_json=True)
    assert len(r.stderr) < 400, r.stderr
