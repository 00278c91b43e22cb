"""`specguard bench`: every bad option or prompt file is exit 2 with one line, before any request or file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import (
    BAD_FILES,
    DEAD,
    GE1,
    GT0,
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


def base(out: Path) -> list[str]:
    return [
        "bench",
        "--url",
        DEAD,
        "--model",
        "m",
        "--prompts",
        "synthetic:random",
        "--out",
        str(out),
        "--num-requests",
        "1",
        "--quiet",
    ]


def positive_float(option: str, bound: str = GT0) -> list[tuple[list[str], int, str]]:
    return [
        ([option, ZERO], USAGE, bound),
        ([option, NEG], USAGE, bound),
        ([option, NAN], USAGE, NOT_FINITE),
        ([option, INF], USAGE, NOT_FINITE),
        ([option, WORD], USAGE, NOT_A_NUMBER),
    ]


CASES = [
    *positive_float("--rate"),
    *positive_float("--duration"),
    *positive_float("--request-timeout"),
    *positive_float("--burstiness", "expected a number > 0"),
    (["--duration", "1e400"], USAGE, NOT_FINITE),
    (["--scrape-interval", ZERO], USAGE, "greater than or equal to 0.1"),
    (["--scrape-interval", NEG], USAGE, "greater than or equal to 0.1"),
    (["--scrape-interval", "0.05"], USAGE, "greater than or equal to 0.1"),
    (["--scrape-interval", NAN], USAGE, NOT_FINITE),
    (["--scrape-interval", INF], USAGE, NOT_FINITE),
    (["--scrape-interval", WORD], USAGE, NOT_A_NUMBER),
    (["--temperature", NEG], USAGE, "--temperature: Input should be greater than or equal to 0"),
    (["--temperature", NAN], USAGE, NOT_FINITE),
    (["--temperature", INF], USAGE, NOT_FINITE),
    (["--temperature", WORD], USAGE, NOT_A_NUMBER),
    (["--top-p", ZERO], USAGE, "--top-p: Input should be greater than 0"),
    (["--top-p", NEG], USAGE, "--top-p: Input should be greater than 0"),
    (["--top-p", "1.5"], USAGE, "--top-p: Input should be less than or equal to 1"),
    (["--top-p", NAN], USAGE, NOT_FINITE),
    (["--top-p", INF], USAGE, NOT_FINITE),
    (["--top-p", WORD], USAGE, NOT_A_NUMBER),
    *int_fuzz("--concurrency"),
    *int_fuzz("--burst"),
    *int_fuzz("--num-requests"),
    *int_fuzz("--max-tokens"),
    *int_fuzz("--warmup", minimum=0),
    *int_fuzz("--seed", minimum=0),
    # the option names in the messages
    (["--concurrency", ZERO], USAGE, "--concurrency: Input should be " + GE1),
    (["--rate", ZERO], USAGE, "--rate: Input should be " + GT0),
    (["--rate", WORD], USAGE, "'--rate'"),
    # URLs
    (["--url", "ftp://x"], USAGE, "--url ftp://x: expected http(s)://host[:port]"),
    (["--url", "localhost:8000"], USAGE, "--url localhost:8000: expected http(s)://host[:port]"),
    (["--url", "http://"], USAGE, "expected http(s)://host[:port]"),
    (["--url", ""], USAGE, "expected http(s)://host[:port]"),
    (["--url", "http://h:0"], USAGE, "port 0"),
    (["--url", "http://h:99999"], USAGE, "--url http://h:99999: not a URL"),
    (["--url", "http://u:p@h:1"], USAGE, "credentials do not go in a URL"),
    (["--url", "http://h:1/?q=1"], USAGE, "without query"),
    (["--metrics-url", "ftp://x"], USAGE, "--metrics-url: expected http(s)://host[:port]"),
    (["--metrics-url", "http://h:0/metrics"], USAGE, "--metrics-url: port 0"),
    # choices and combinations
    (["--arrival", "nope"], USAGE, "'--arrival'"),
    (["--api", "nope"], USAGE, "'--api'"),
    (["--model", ""], USAGE, "--model: String should have at least 1 character"),
    (["--rate", "1", "--concurrency", "2"], USAGE, "give only one of --rate, --concurrency, --burst"),
    (["--concurrency", "2", "--burst", "2"], USAGE, "give only one of --rate, --concurrency, --burst"),
    (["--api-key-env", "SPECGUARD_TEST_UNSET_VAR"], USAGE, "--api-key-env SPECGUARD_TEST_UNSET_VAR: the variable is not set"),
    (["--prompts", "synthetic:nope"], USAGE, "unknown synthetic prompt set 'nope'"),
    (["--prompts", ""], USAGE, "--prompts: expected a JSONL prompt file or synthetic:NAME"),
    (["--prompts", " "], USAGE, "--prompts: expected a JSONL prompt file or synthetic:NAME"),
    (["--unknown-option"], USAGE, "No such option: --unknown-option"),
    # SLOs: unknown keys and non-positive bounds name the option
    (["--slo", "ttft=500"], USAGE, "--slo ttft=500: unknown key 'ttft'"),
    (["--slo", "ttft_ms=0"], USAGE, "--slo ttft_ms=0: ttft_ms must be a positive number"),
    (["--slo", "itl_ms=-1"], USAGE, "--slo itl_ms=-1: itl_ms must be a positive number"),
    (["--slo", "e2e_ms=nan"], USAGE, "--slo e2e_ms=nan: e2e_ms must be a positive number"),
    (["--slo", "tpot_ms=abc"], USAGE, "--slo tpot_ms=abc: tpot_ms='abc' is not a number"),
    (["--slo", ","], USAGE, "--slo ',': give at least one of"),
    # what --extra-body overrides is held to the rules of the options that set it (--max-tokens 0 is refused)
    (["--extra-body", '{"max_tokens": 0}'], USAGE, "--extra-body: key 'max_tokens': Input should be " + GE1),
    (["--extra-body", '{"max_completion_tokens": 0}'], USAGE, "--extra-body: key 'max_completion_tokens'"),
    (["--extra-body", '{"temperature": -1}'], USAGE, "--extra-body: key 'temperature'"),
    (["--extra-body", '{"top_p": 1.5}'], USAGE, "--extra-body: key 'top_p'"),
    (["--extra-body", '{"temperature": NaN}'], USAGE, "--extra-body: key 'temperature': Input should be a finite number"),
    (["--extra-body", '{"max_tokens": "8"}'], USAGE, "--extra-body: key 'max_tokens': Input should be a valid integer"),
    (["--extra-body", '{"ignore_eos": "yes"}'], USAGE, "--extra-body: key 'ignore_eos'"),
    # a CR or LF in a header would inject another header; refused at the edge, not an internal error mid-run
    (
        ["--header", "X-A: b\r\nX-Injected: 1"],
        USAGE,
        "--header 'X-A: b\\r\\nX-Injected: 1': the value holds the control character",
    ),
    (["--header", "X-A: b\x00"], USAGE, "the value holds the control character '\\x00'"),
    # a typo'd concurrency spent 90 s creating workers before sending anything
    (["--concurrency", "100000000"], USAGE, "--concurrency: expected at most 10,000 requests in flight (got 100,000,000)"),
]


@pytest.mark.parametrize(("extra", "code", "fragment"), CASES, ids=[case_id(c) for c in CASES])
def test_bad_option(cli: Cli, tmp_path: Path, extra: list[str], code: int, fragment: str) -> None:
    cli.fails([*base(tmp_path / "run"), *extra], code, fragment)


def test_needs_a_stop(cli: Cli, tmp_path: Path) -> None:
    args = base(tmp_path / "run")
    i = args.index("--num-requests")
    cli.fails(args[:i] + args[i + 2 :], USAGE, "give --num-requests and/or --duration")


@pytest.mark.parametrize("missing", ["--model", "--prompts", "--out"])
def test_required_option(cli: Cli, tmp_path: Path, missing: str) -> None:
    args = base(tmp_path / "run")
    i = args.index(missing)
    cli.fails(args[:i] + args[i + 2 :], USAGE, f"Missing option '{missing}'")


def test_no_base_url_and_no_openai_base_url(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    args = base(tmp_path / "run")
    i = args.index("--url")
    cli.fails(args[:i] + args[i + 2 :], USAGE, "--url: not given and OPENAI_BASE_URL is not set")


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_prompt_file(cli: Cli, tmp_path: Path, kind: str) -> None:
    path = bad_file(tmp_path, kind, "prompts.jsonl")
    cli.fails([*base(tmp_path / "run"), "--prompts", path], USAGE, f"{path}: ")
    cli.fails([*base(tmp_path / "run"), "--prompts", path], USAGE, BAD_FILES[kind][1])


def test_prompt_file_directory_message_is_plain(cli: Cli, tmp_path: Path) -> None:
    path = bad_file(tmp_path, "directory", "prompts")
    r = cli.fails([*base(tmp_path / "run"), "--prompts", path], USAGE, "is a directory; expected a prompt file")
    assert "file file" not in r.stderr


PROMPT_LINES = [
    ('{"prompt": "x"}\n{bad\n', ":2: not valid JSON"),
    ('["a"]\n', ":1: expected a JSON object"),
    ('{"prompt": "x", "temperature": -1}\n', ":1: key 'temperature'"),
    ('{"prompt": "x", "top_p": 0}\n', ":1: key 'top_p'"),
    ('{"prompt": "x", "max_tokens": 0}\n', ":1: key 'max_tokens'"),
    ('{"prompt": "x", "colour": 1}\n', ":1: key 'colour': unknown key"),
    ('{"segment": "s"}\n', ":1: "),
    ('{"messages": []}\n', ":1:"),
]


@pytest.mark.parametrize(("text", "fragment"), PROMPT_LINES, ids=[t.strip()[:30] for t, _ in PROMPT_LINES])
def test_bad_prompt_line(cli: Cli, tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    cli.fails([*base(tmp_path / "run"), "--prompts", path], USAGE, f"{path}{fragment}")


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ('[{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}]', "sharegpt"),
        ('{"question_id": 1, "category": "qa", "turns": ["hi"]}\n', "spec-bench"),
        ('{"question_id": 1, "category": "qa", "sub_category": "x", "difficulty": "hard", "turns": ["hi"]}\n', "speed-bench"),
    ],
)
def test_a_dataset_given_without_its_format_names_the_flag_that_reads_it(cli: Cli, tmp_path: Path, text: str, fmt: str) -> None:
    """Issue 29: a ShareGPT file without --prompt-format failed with "expected a JSON object, got list"."""
    path = tmp_path / "data.json"
    path.write_text(text)
    cli.fails([*base(tmp_path / "run"), "--prompts", path], USAGE, f"looks like a {fmt} file")
    cli.fails([*base(tmp_path / "run"), "--prompts", path], USAGE, f"--prompt-format {fmt}")


def test_tokenizer_not_found(cli: Cli, tmp_path: Path) -> None:
    cli.fails([*base(tmp_path / "run"), "--tokenizer", tmp_path / "nope"], USAGE, "--tokenizer")
    cli.fails([*base(tmp_path / "run"), "--tokenizer", tmp_path / "nope"], USAGE, "not found")


def test_tokenizer_directory_without_tokenizer_json(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    cli.fails([*base(tmp_path / "run"), "--tokenizer", tmp_path / "tok"], USAGE, "no tokenizer.json there")


def test_tokenizer_that_is_not_a_tokenizer(cli: Cli, tmp_path: Path) -> None:
    """Refused at the edge (exit 2), as assess does, not by the record writer's traceback mid-run (exit 4)."""
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("garbage")
    (tmp_path / "notes.txt").write_text('{"not": "a tokenizer"}')
    for path in (tmp_path / "tok", tmp_path / "notes.txt"):
        cli.fails(
            [*base(tmp_path / "run"), "--tokenizer", path], USAGE, f"--tokenizer {path}: cannot load it as a tokenizer.json"
        )


@pytest.mark.parametrize("out", ["", "."])
def test_out_that_is_empty_or_the_working_directory(cli: Cli, tmp_path: Path, out: str) -> None:
    """``--out ''`` wrote run.json, requests.jsonl and summary.json into the working directory."""
    args = base(tmp_path / "run")
    args[args.index("--out") + 1] = out
    cli.fails(args, USAGE, "--out: expected a new run directory, got an empty path or '.'")


def test_out_is_an_existing_file(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "run"
    target.write_text("keep me")
    cli.fails(base(target), USAGE, f"--out {target}: is a file")
    assert target.read_text() == "keep me"


def test_out_already_holds_a_run(cli: Cli, tmp_path: Path) -> None:
    """Refused before the server is asked anything (nothing sent, nothing written)."""
    target = make_run(tmp_path / "run")
    cli.fails(base(target), USAGE, "already holds a run")


# Values that are valid: the parser accepts them. Each is paired with a bad option that is checked
# later, so the command stops at that one (exit 2 naming it, not the value under test) before any traffic.
VALID = [
    (["--seed", "0"], "--top-p", "0"),
    (["--warmup", "0"], "--top-p", "0"),
    (["--temperature", "0"], "--request-timeout", "0"),
    (["--top-p", "1"], "--request-timeout", "0"),
    (["--max-tokens", "1"], "--request-timeout", "0"),
    (["--scrape-interval", "0.1"], "--request-timeout", "0"),
    (["--burstiness", "0.5", "--rate", "2", "--arrival", "gamma"], "--top-p", "0"),
    (["--concurrency", "1"], "--top-p", "0"),
    (["--burst", "1"], "--top-p", "0"),
    (["--duration", "0.5"], "--top-p", "0"),
    (["--metrics-url", "none"], "--top-p", "0"),
    (["--url", "https://example.invalid:8443/v1"], "--top-p", "0"),
]


@pytest.mark.parametrize(("valid", "bad", "value"), VALID, ids=[case_id(v[0]) for v in VALID])
def test_valid_value_is_accepted(cli: Cli, tmp_path: Path, valid: list[str], bad: str, value: str) -> None:
    r = cli.fails([*base(tmp_path / "run"), *valid, bad, value], USAGE, f"{bad}: ")
    assert valid[0] not in r.stderr
