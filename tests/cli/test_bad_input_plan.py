"""`specguard plan`: bad options and Gate 1 files are exit 2, with the JSON error object under --json."""

from __future__ import annotations

import json
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
    PYD_NOT_FINITE,
    USAGE,
    WORD,
    ZERO,
    Cli,
    bad_file,
    case_id,
    int_fuzz,
)

BASE = ["plan", "--target", "llama-3.1-8b", "--gpu", "h100-80gb", "--vllm-version", "0.32.0", "--json"]


def float_fuzz(option: str, *, zero_ok: bool = False) -> list[tuple[list[str], int, str]]:
    bound = "greater than or equal to 0" if zero_ok else GT0
    cases = [
        ([option, NEG], USAGE, f"{option}: Input should be {bound}"),
        ([option, NAN], USAGE, f"{option}: Input should be a {PYD_NOT_FINITE}"),
        ([option, INF], USAGE, f"{option}: Input should be a {PYD_NOT_FINITE}"),
        ([option, WORD], USAGE, f"'{option}': Input should be a {NOT_A_NUMBER}"),
    ]
    if not zero_ok:
        cases.insert(0, ([option, ZERO], USAGE, f"{option}: Input should be {bound}"))
    return cases


def named_int_fuzz(option: str, prefix: tuple[str, ...] = ()) -> list[tuple[list[str], int, str]]:
    """Out of range: named by specguard (``--opt: ...``); not an integer: named by the parser (``'--opt'``)."""
    return [
        (args, code, f"{option}: Input should be {GE1}" if frag == GE1 else f"'{option}': Input should be a {frag}")
        for args, code, frag in int_fuzz(option, prefix=prefix)
    ]


CASES = [
    *float_fuzz("--gpu-memory-gib"),
    *float_fuzz("--kv-cache-memory-gib"),
    *float_fuzz("--gpu-memory-utilization"),
    (["--gpu-memory-utilization", "1.5"], USAGE, "--gpu-memory-utilization: Input should be less than or equal to 1"),
    *float_fuzz("--non-kv-reserve-gib", zero_ok=True),
    *named_int_fuzz("--tp"),
    *named_int_fuzz("--draft-layers", ("--method", "eagle")),
    *named_int_fuzz("--draft-tp", ("--draft", "llama-3.2-1b")),
    *named_int_fuzz("--num-speculative-tokens"),
    *named_int_fuzz("--max-model-len"),
    *named_int_fuzz("--block-size"),
    *named_int_fuzz("--expected-concurrency"),
    *named_int_fuzz("--prompt-len", ("--output-len", "100")),
    *named_int_fuzz("--output-len", ("--prompt-len", "100")),
    # tensor parallelism must divide the heads
    (["--tp", "3"], USAGE, "--tp 3: llama-3.1-8b has 32 attention heads"),
    (["--tp", "5"], USAGE, "--tp 5: llama-3.1-8b has 32 attention heads"),
    (["--draft", "llama-3.2-1b", "--draft-tp", "3"], USAGE, "--draft-tp 3: llama-3.2-1b has 32 attention heads"),
    (["--prompt-len", "100"], USAGE, "--prompt-len and --output-len go together"),
    (["--output-len", "100"], USAGE, "--prompt-len and --output-len go together"),
    # names that are not in the catalog
    (["--target", "nope-model"], USAGE, "unknown model 'nope-model'"),
    (["--target", ""], USAGE, "--target: String should have at least 1 character"),
    (["--draft", "nope-model"], USAGE, "unknown model 'nope-model'"),
    (["--gpu", "nope"], USAGE, "unknown GPU 'nope'"),
    (["--gpu", "nope", "--url", DEAD], USAGE, "unknown GPU 'nope'"),  # refused before the server is asked
    (["--dtype", "nope"], USAGE, "--dtype nope: unknown weight dtype"),
    (["--kv-cache-dtype", "nope"], USAGE, "--kv-cache-dtype nope: unknown KV-cache dtype"),
    (["--vllm-version", "banana"], USAGE, "--vllm-version 'banana': expected a vLLM version"),
    (["--vllm-version", ""], USAGE, "--vllm-version '': expected a vLLM version"),
    # URLs
    (["--url", "ftp://x"], USAGE, "--url: expected http(s)://host[:port]"),
    (["--url", "http://"], USAGE, "--url: expected http(s)://host[:port]"),
    (["--url", "localhost:8000"], USAGE, "--url: expected http(s)://host[:port]"),
    (["--url", "http://h:0"], USAGE, "--url: port 0"),
    (["--url", "http://h:99999"], USAGE, "--url: not a URL"),
    (["--url", "http://u:p@h:1"], USAGE, "--url: credentials do not go in a URL"),
    (["--api-key-env", "SPECGUARD_TEST_UNSET_VAR"], USAGE, "--api-key-env SPECGUARD_TEST_UNSET_VAR: the variable is not set"),
    (["--unknown-option"], USAGE, "No such option: --unknown-option"),
]


@pytest.mark.parametrize(("extra", "code", "fragment"), CASES, ids=[case_id(c) for c in CASES])
def test_bad_option(cli: Cli, extra: list[str], code: int, fragment: str) -> None:
    cli.fails([*BASE, *extra], code, fragment, as_json=True)


def test_target_directory_without_config(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    cli.fails([*BASE, "--target", tmp_path / "model"], USAGE, "config.json", as_json=True)


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_gate1_file(cli: Cli, tmp_path: Path, kind: str) -> None:
    path = bad_file(tmp_path, kind, "assess.json")
    cli.fails([*BASE, "--gate1", path], USAGE, f"{path}: ", as_json=True)
    cli.fails([*BASE, "--gate1", path], USAGE, BAD_FILES[kind][1], as_json=True)


GATE1_CONTENT = [
    ("not json", "--gate1"),
    ("[1, 2]", "--gate1"),
    ('{"segments": [1]}', "--gate1"),
    ('{"segments": {"a": {"ngram": 5}}}', "--gate1"),
    ('{"mean_prompt_tokens": 1e400, "mean_output_tokens": 10}', "--gate1"),
]


@pytest.mark.parametrize(("text", "fragment"), GATE1_CONTENT, ids=[t for t, _ in GATE1_CONTENT])
def test_gate1_file_that_is_not_an_assessment(cli: Cli, tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "assess.json"
    path.write_text(text)
    cli.fails([*BASE, "--gate1", path], USAGE, fragment, as_json=True)


VALID = [
    ["--non-kv-reserve-gib", "0"],
    ["--gpu-memory-utilization", "1"],
    ["--tp", "8"],
    ["--tp", "16"],
    ["--block-size", "1"],
    ["--prompt-len", "1", "--output-len", "1"],
    ["--gpu-memory-gib", "0.5"],
    ["--expected-concurrency", "1"],
]


@pytest.mark.parametrize("extra", VALID, ids=[case_id(v) for v in VALID])
def test_valid_value_is_accepted(cli: Cli, extra: list[str]) -> None:
    r = cli.ok([*BASE, *extra])
    assert json.loads(r.stdout)["target"]["name"] == "llama-3.1-8b"
