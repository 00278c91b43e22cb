"""`specguard assess`: bad options, logs and companion files are exit 2 with a JSON error; nothing is written.

The logs carry token ids, so ``--url`` at a dead port tokenizes nothing and sends nothing (the guard checks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import (
    BAD_FILES,
    DEAD,
    GE1,
    INF,
    NAN,
    NEG,
    NOT_A_NUMBER,
    NOT_FINITE,
    USAGE,
    WORD,
    ZERO,
    Cli,
    bad_file,
    case_id,
    int_fuzz,
    make_run,
)

ENTRY = {
    "schema_version": "specguard.request_log/1",
    "endpoint": "completions",
    "prompt_token_ids": [1, 2, 3, 1, 2, 3],
    "response": {"token_ids": [1, 2, 3]},
}
TEXT_ENTRY = {"schema_version": "specguard.request_log/1", "endpoint": "completions", "prompt": "needs /tokenize"}


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(json.dumps(ENTRY) for _ in range(3)) + "\n")
    return path


def base(log: Path) -> list[str]:
    return ["assess", str(log), "--url", DEAD, "--json"]


CASES = [
    (["--capacity-rps", ZERO], USAGE, "--capacity-rps: expected a number > 0"),
    (["--capacity-rps", NEG], USAGE, "--capacity-rps: expected a number > 0"),
    (["--capacity-rps", NAN], USAGE, f"--capacity-rps: {NOT_FINITE}"),
    (["--capacity-rps", INF], USAGE, f"--capacity-rps: {NOT_FINITE}"),
    (["--capacity-rps", WORD], USAGE, f"'--capacity-rps': Input should be a {NOT_A_NUMBER}"),
    *int_fuzz("--max-model-len"),
    (["--max-model-len", ZERO], USAGE, f"'--max-model-len': Input should be {GE1}"),
    (["--segment-rule", "x"], USAGE, "--segment-rule 'x': expected NAME=REGEX"),
    (["--segment-rule", "=x"], USAGE, "--segment-rule '=x': expected NAME=REGEX"),
    (["--segment-rule", "a=("], USAGE, "--segment-rule 'a=(': bad regular expression"),
    (["--format", "nope"], USAGE, "'--format'"),
    (["--url", "ftp://x"], USAGE, "--url ftp://x: expected http(s)://host[:port]"),
    (["--url", "http://h:0"], USAGE, "--url http://h:0: port 0"),
    (["--url", "localhost:8000"], USAGE, "expected http(s)://host[:port]"),
    (["--url", "http://u:p@h:1"], USAGE, "credentials do not go in a URL"),
    (["--tokenizer", "/"], USAGE, "give exactly one of --tokenizer DIR or --url URL"),
    (["--write-plan", "plan-out"], USAGE, "--write-plan needs --target ("),
    (["--api-key-env", "SPECGUARD_TEST_UNSET_VAR"], USAGE, "--api-key-env SPECGUARD_TEST_UNSET_VAR: the variable is not set"),
    (["--unknown-option"], USAGE, "No such option: --unknown-option"),
]


@pytest.mark.parametrize(("extra", "code", "fragment"), CASES, ids=[case_id(c) for c in CASES])
def test_bad_option(cli: Cli, log: Path, extra: list[str], code: int, fragment: str) -> None:
    cli.fails([*base(log), *extra], code, fragment, as_json=True)


def test_needs_a_tokenizer(cli: Cli, log: Path) -> None:
    cli.fails(["assess", log, "--json"], USAGE, "give exactly one of --tokenizer DIR or --url URL", as_json=True)


def test_tokenizer_not_found(cli: Cli, log: Path, tmp_path: Path) -> None:
    cli.fails(
        ["assess", log, "--tokenizer", tmp_path / "nope", "--json"],
        USAGE,
        f"--tokenizer {tmp_path / 'nope'}: not found",
        as_json=True,
    )


def test_tokenizer_directory_without_tokenizer_json(cli: Cli, log: Path, tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    cli.fails(["assess", log, "--tokenizer", tmp_path / "tok", "--json"], USAGE, "no tokenizer.json there", as_json=True)


def test_tokenizer_json_that_is_garbage(cli: Cli, log: Path, tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("garbage")
    cli.fails(
        ["assess", log, "--tokenizer", tmp_path / "tok", "--json"],
        USAGE,
        f"--tokenizer {tmp_path / 'tok'}: cannot load",
        as_json=True,
    )


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_log_file(cli: Cli, tmp_path: Path, kind: str) -> None:
    path = bad_file(tmp_path, kind, "log.jsonl")
    fragment = "the request log is empty" if kind in ("empty", "whitespace") else BAD_FILES[kind][1]
    cli.fails(base(path), USAGE, f"{path}: ", as_json=True)
    cli.fails(base(path), USAGE, fragment, as_json=True)


LOG_LINES = [
    (["{bad"], ":1: not JSON"),
    (["[1]"], ":1: expected a JSON object, got list"),
    (['{"what": 1}'], ":1: cannot tell the log format"),
    ([json.dumps(ENTRY), "{bad"], ":2: not JSON"),
    # a line the server would tokenize, then a bad line: the bad line is found before /tokenize is asked
    ([json.dumps(TEXT_ENTRY), "{bad"], ":2: not JSON"),
    ([json.dumps({**ENTRY, "endpoint": "nope"})], ":1:"),
    ([json.dumps({**ENTRY, "prompt": "x"})], ":1:"),
]


@pytest.mark.parametrize(("lines", "fragment"), LOG_LINES, ids=[f"{len(ls)}:{ls[-1][:20]}" for ls, _ in LOG_LINES])
def test_bad_log_line(cli: Cli, tmp_path: Path, lines: list[str], fragment: str) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cli.fails(base(path), USAGE, f"{path}{fragment}", as_json=True)


def test_bad_log_leaves_no_requests_out(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(ENTRY) + "\n{bad\n")
    cli.fails([*base(path), "--requests-out", tmp_path / "replay.jsonl"], USAGE, f"{path}:2", as_json=True)
    assert not (tmp_path / "replay.jsonl").exists()


def test_requests_out_exists(cli: Cli, log: Path, tmp_path: Path) -> None:
    target = tmp_path / "replay.jsonl"
    target.write_text("keep me\n")
    cli.fails([*base(log), "--requests-out", target], USAGE, f"--requests-out: {target} already exists", as_json=True)
    assert target.read_text() == "keep me\n"


def test_requests_out_is_a_directory(cli: Cli, log: Path, tmp_path: Path) -> None:
    (tmp_path / "replay").mkdir()
    cli.fails([*base(log), "--requests-out", tmp_path / "replay", "--force"], USAGE, "is a directory", as_json=True)


def test_requests_out_in_a_missing_directory(cli: Cli, log: Path, tmp_path: Path) -> None:
    cli.fails([*base(log), "--requests-out", tmp_path / "no" / "replay.jsonl"], USAGE, "does not exist", as_json=True)


def test_write_plan_exists(cli: Cli, log: Path, tmp_path: Path) -> None:
    (tmp_path / "next").mkdir()
    (tmp_path / "next" / "plan.yaml").write_text("keep: me\n")
    cli.fails([*base(log), "--write-plan", tmp_path / "next", "--target", "m"], USAGE, "--write-plan: ", as_json=True)
    assert (tmp_path / "next" / "plan.yaml").read_text() == "keep: me\n"


def test_bench_run_not_found(cli: Cli, log: Path, tmp_path: Path) -> None:
    cli.fails([*base(log), "--bench-run", tmp_path / "nope"], USAGE, "run directory not found", as_json=True)


def test_bench_run_that_is_not_a_run(cli: Cli, log: Path, tmp_path: Path) -> None:
    (tmp_path / "empty-run").mkdir()
    cli.fails([*base(log), "--bench-run", tmp_path / "empty-run"], USAGE, "not a run directory", as_json=True)


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_plan_json_file(cli: Cli, log: Path, tmp_path: Path, kind: str) -> None:
    path = bad_file(tmp_path, kind, "plan.json")
    cli.fails([*base(log), "--plan-json", path], USAGE, f"{path}: ", as_json=True)
    cli.fails([*base(log), "--plan-json", path], USAGE, BAD_FILES[kind][1], as_json=True)


@pytest.mark.parametrize("text", ["[1]", '{"a": 1}', "not json"])
def test_plan_json_that_is_not_a_plan(cli: Cli, log: Path, tmp_path: Path, text: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(text)
    cli.fails([*base(log), "--plan-json", path], USAGE, f"--plan-json {path}: not a 'specguard plan --json' result", as_json=True)


VALID = [
    ["--max-model-len", "1"],
    ["--capacity-rps", "0.5"],
    ["--segment-rule", "all=.*"],
    ["--skip-bad"],
    ["--no-sweep", "--no-suffix"],
]


@pytest.mark.parametrize("extra", VALID, ids=[case_id(v) for v in VALID])
def test_valid_value_is_accepted(cli: Cli, log: Path, extra: list[str]) -> None:
    r = cli.ok([*base(log), *extra])
    assert json.loads(r.stdout)["requests"] == 3


def test_bench_run_gives_the_capacity(cli: Cli, log: Path, tmp_path: Path) -> None:
    r = cli.ok([*base(log), "--bench-run", make_run(tmp_path / "run")])
    assert json.loads(r.stdout)["requests"] == 3


def word_tokenizer(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "x": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    d = tmp_path / "tok"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    return d


@pytest.mark.parametrize("as_file", [False, True], ids=["directory", "tokenizer.json"])
def test_local_tokenizer_is_accepted(cli: Cli, tmp_path: Path, as_file: bool) -> None:
    d = word_tokenizer(tmp_path)
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({**TEXT_ENTRY, "prompt": "x x x", "response": {"text": "x x"}}) + "\n")
    r = cli.ok(["assess", path, "--tokenizer", d / "tokenizer.json" if as_file else d, "--json"])
    assert json.loads(r.stdout)["requests"] == 1


def test_local_tokenizer_bad_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({**TEXT_ENTRY, "prompt": "x"}) + "\n{bad\n")
    cli.fails(
        ["assess", path, "--tokenizer", word_tokenizer(tmp_path), "--json", "--requests-out", tmp_path / "replay.jsonl"],
        USAGE,
        f"{path}:2: not JSON",
        as_json=True,
    )
