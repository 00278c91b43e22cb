"""`specguard check`, `report` and `demo`: a bad plan, --out or check directory is exit 2 before anything runs.

The plans' arms are endpoints at a dead port; every case here must stop at validation (the guard refuses
traffic, runtimes and models, and the test checks that nothing was written).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import BAD_FILES, USAGE, Cli, bad_file, make_check_dir, plan_data, write_plan


def check(plan: Path, out: Path, *extra: str) -> list[str]:
    return ["check", str(plan), "--out", str(out), *extra]


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_plan_file(cli: Cli, tmp_path: Path, kind: str) -> None:
    path = bad_file(tmp_path, kind, "plan.yaml")
    cli.fails(check(path, tmp_path / "out"), USAGE, f"{path}: ")
    cli.fails(check(path, tmp_path / "out"), USAGE, BAD_FILES[kind][1])


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("arms: [\n", "not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping at the top level"),
        ("just a string\n", "expected a mapping at the top level"),
    ],
)
def test_plan_that_is_not_a_mapping(cli: Cli, tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    cli.fails(check(path, tmp_path / "out"), USAGE, f"{path}: {fragment}")


def set_key(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node: Any = data
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    node[last] = value
    return data


NAN, INF = float("nan"), float("inf")

# key -> bad values: every numeric key of a plan fuzzed like the options (0, -1, nan, inf, a word).
KEY_CASES: list[tuple[str, Any, str]] = []
for key, values in {
    "traffic.0.rate": [0, -1, NAN, INF, "abc"],
    "traffic.0.burstiness": [0, -1, NAN, INF, "abc"],
    "traffic.0.num_requests": [0, -1, NAN, INF, "abc"],
    "traffic.0.duration_s": [0, -1, NAN, INF, "abc"],
    "sampling.0.temperature": [-1, NAN, INF, "abc"],
    "sampling.0.top_p": [0, -1, 1.5, NAN, INF, "abc"],
    "prompts.0.count": [0, -1, NAN, INF, "abc"],
    "repetitions": [0, -1, NAN, INF, "abc"],
    "warmup": [-1, NAN, INF, "abc"],
    "seed": [-1, NAN, INF, "abc"],
    "max_tokens": [0, -1, NAN, INF, "abc"],
    "statistics.resamples": [0, 10, NAN, "abc"],
    "statistics.min_tail_samples": [0, -1, NAN, "abc"],
    "objective.min_improvement": [-1, 1, NAN, INF, "abc"],
    "guardrails.max_p99_e2e_regression": [-1, NAN, INF, "abc"],
    "guardrails.max_error_rate_increase": [-1, NAN, INF, "abc"],
}.items():
    KEY_CASES += [(key, v, f"key '{key}'") for v in values]
KEY_CASES += [
    ("traffic.0.concurrency", 0, "key 'traffic.0.concurrency'"),
    ("traffic.0.concurrency", 2, "key 'traffic.0'"),
    ("traffic.0.arrival", "nope", "key 'traffic.0.arrival'"),
    ("objective.metric", "nope", "key 'objective.metric'"),
    ("order", "random", "key 'order'"),
    ("api", "grpc", "key 'api'"),
    ("colour", "red", "key 'colour': unknown key"),
    ("traffic.0.target", False, "mark at least one traffic level 'target: true'"),
    ("traffic", [], "key 'traffic'"),
    ("sampling", [{"name": "a", "temperature": 0}, {"name": "a", "temperature": 1}], "names must be unique"),
    ("arms.baseline.endpoint.base_url", "ftp://x", "key 'arms.baseline.endpoint.base_url'"),
    ("arms.baseline.endpoint.base_url", "http://h:0", "port 0"),
    ("arms.candidate.endpoint.metrics_url", "localhost:9", "key 'arms.candidate.endpoint.metrics_url'"),
    ("arms.baseline.launch", {"model": "m"}, "exactly one of 'launch' or 'endpoint'"),
]


@pytest.mark.parametrize(("key", "value", "fragment"), KEY_CASES, ids=[f"{k}={v!r}" for k, v, _ in KEY_CASES])
def test_bad_plan_key(cli: Cli, tmp_path: Path, key: str, value: Any, fragment: str) -> None:
    path = write_plan(tmp_path / "plan.yaml", set_key(copy.deepcopy(plan_data()), key, value))
    cli.fails(check(path, tmp_path / "out"), USAGE, fragment)


def test_plan_error_names_the_line(cli: Cli, tmp_path: Path) -> None:
    path = write_plan(tmp_path / "plan.yaml", set_key(plan_data(), "repetitions", 0))
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("repetitions"))
    cli.fails(check(path, tmp_path / "out"), USAGE, f"{path}:{line}: key 'repetitions'")


# The dry run refuses what the check refuses before it sends (it accepted a missing prompt file, an unset
# api_key_env and a used --out, and printed a sizing for a plan the check would then refuse).
RUN_OR_DRY_RUN = pytest.mark.parametrize("extra", [[], ["--dry-run"]], ids=["check", "dry-run"])


@RUN_OR_DRY_RUN
def test_prompt_file_not_found(cli: Cli, tmp_path: Path, extra: list[str]) -> None:
    path = write_plan(tmp_path / "plan.yaml", set_key(plan_data(), "prompts", [{"source": "nope.jsonl"}]))
    cli.fails(check(path, tmp_path / "out", *extra), USAGE, f"{tmp_path / 'nope.jsonl'}: prompt file not found")


@RUN_OR_DRY_RUN
def test_api_key_env_not_set(cli: Cli, tmp_path: Path, extra: list[str]) -> None:
    data = set_key(plan_data(), "arms.candidate.endpoint.api_key_env", "SPECGUARD_TEST_UNSET_VAR")
    cli.fails(
        check(write_plan(tmp_path / "plan.yaml", data), tmp_path / "out", *extra),
        USAGE,
        "arms.candidate.endpoint.api_key_env: the environment variable SPECGUARD_TEST_UNSET_VAR is not set",
    )


@RUN_OR_DRY_RUN
def test_out_exists_and_is_not_empty(cli: Cli, tmp_path: Path, extra: list[str]) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("keep me")
    cli.fails(check(write_plan(tmp_path / "plan.yaml"), tmp_path / "out", *extra), USAGE, "already exists and is not empty")


def test_out_is_a_file(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "out").write_text("keep me")
    cli.fails(check(write_plan(tmp_path / "plan.yaml"), tmp_path / "out"), USAGE, f"--out {tmp_path / 'out'}")


@RUN_OR_DRY_RUN
def test_resume_without_state(cli: Cli, tmp_path: Path, extra: list[str]) -> None:
    (tmp_path / "out").mkdir()
    cli.fails(check(write_plan(tmp_path / "plan.yaml"), tmp_path / "out", "--resume", *extra), USAGE, "holds no check state")


def test_check_needs_out(cli: Cli, tmp_path: Path) -> None:
    cli.fails(["check", write_plan(tmp_path / "plan.yaml")], USAGE, "Missing option '--out'")


# --- report ---------------------------------------------------------------------------------------


def test_report_not_found(cli: Cli, tmp_path: Path) -> None:
    cli.fails(["report", tmp_path / "nope"], USAGE, f"{tmp_path / 'nope'}: check directory not found")


def test_report_of_a_file(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    cli.fails(["report", tmp_path / "f"], USAGE, "not a directory")


def test_report_of_a_directory_without_check_json(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    cli.fails(["report", tmp_path / "d"], USAGE, "no check.json")


@pytest.mark.parametrize("kind", ["empty", "whitespace", "bom", "binary", "utf16"])
def test_report_bad_check_json(cli: Cli, tmp_path: Path, kind: str) -> None:
    (tmp_path / "d").mkdir()
    content, fragment = BAD_FILES[kind]
    (tmp_path / "d" / "check.json").write_bytes(content or b"")
    cli.fails(["report", tmp_path / "d"], USAGE, f"{tmp_path / 'd' / 'check.json'}: ")
    cli.fails(["report", tmp_path / "d"], USAGE, fragment)


def test_report_check_json_not_a_record(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "check.json").write_text('{"plan": 1}')
    cli.fails(["report", tmp_path / "d"], USAGE, "check.json: ")


@pytest.mark.parametrize("existing", ["verdict.json", "report.md", "report.html"])
def test_report_refuses_existing_outputs(cli: Cli, tmp_path: Path, existing: str) -> None:
    d = make_check_dir(tmp_path / "d")
    (d / existing).write_text("keep me")
    cli.fails(["report", d], USAGE, f"{existing} already exist; pass --force")
    assert (d / existing).read_text() == "keep me"


@pytest.mark.parametrize("existing", ["report-partial.md", "report-partial.html"])
def test_report_partial_refuses_existing_outputs(cli: Cli, tmp_path: Path, existing: str) -> None:
    d = make_check_dir(tmp_path / "d", complete=False)
    (d / existing).write_text("keep me")
    cli.fails(["report", d, "--partial"], USAGE, f"{existing} already exist; pass --force")


def test_report_of_an_incomplete_check(cli: Cli, tmp_path: Path) -> None:
    d = make_check_dir(tmp_path / "d", complete=False)
    cli.fails(["report", d], USAGE, "the check is incomplete")


# --- demo -------------------------------------------------------------------------------------------


def test_demo_out_exists_and_is_not_empty(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("keep me")
    cli.fails(["demo", "--out", tmp_path / "out"], USAGE, "already exists and is not empty")


def test_demo_out_is_a_file(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "out").write_text("keep me")
    cli.fails(["demo", "--out", tmp_path / "out"], USAGE, f"--out {tmp_path / 'out'}")


def test_demo_unknown_option(cli: Cli) -> None:
    cli.fails(["demo", "--unknown-option"], USAGE, "No such option: --unknown-option")


def test_dry_run_prints_the_sizing_and_sends_nothing(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    r = cli.ok(["check", plan, "--out", tmp_path / "out", "--dry-run"])
    assert "nothing is sent" in r.stdout and "steady / greedy / prompts[0]" in r.stdout and "total:" in r.stdout
    assert not (tmp_path / "out").exists()


def test_check_warns_when_the_plan_cannot_reach_go_before_any_traffic(cli: Cli, tmp_path: Path) -> None:
    r = cli.invoke(["check", write_plan(tmp_path / "plan.yaml"), "--out", tmp_path / "out"])
    warning = r.stderr.index("cannot reach GO")
    assert warning < r.stderr.index("error:")  # printed before the run refused by the guard


def test_dry_run_sizes_from_a_pilot_and_refuses_a_pilot_that_is_not_a_run(cli: Cli, tmp_path: Path) -> None:
    from tests.unit.report.test_report import make_check

    _, pilot = make_check(tmp_path / "pilot")
    plan = write_plan(tmp_path / "plan.yaml")
    r = cli.ok(["check", plan, "--out", tmp_path / "out", "--dry-run", "--pilot", pilot, "--assume-improvement", "0.3"])
    assert "if the objective is truly 30 % better" in r.stdout and f"measured in {pilot}, 120 requests" in r.stdout
    cli.fails(
        ["check", plan, "--out", tmp_path / "out", "--dry-run", "--pilot", tmp_path], USAGE, "--pilot expects a run directory"
    )


def test_sizing_options_without_dry_run_are_refused_before_any_traffic(cli: Cli, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml")
    cli.fails(["check", plan, "--out", tmp_path / "out", "--pilot", tmp_path], USAGE, "--pilot: size a plan with --dry-run")
    cli.fails(["check", plan, "--out", tmp_path / "out", "--assume-guardrail-ratio", "1.1"], USAGE, "--assume-guardrail-ratio")
    assert not (tmp_path / "out").exists()
