"""Small bugs of issue 10, each pinned: the error a user gets names what they gave, and ends as it should."""

from __future__ import annotations

from pathlib import Path

from specguard.errors import ExitCode
from tests.cli.helpers import DEAD, USAGE, Cli, plan_data, snapshot, write_plan


def test_plan_with_an_unreachable_url_is_a_runtime_failure(cli: Cli, tmp_path: Path) -> None:
    """It used to print a plan without the server and exit 0, as if the server had been compared."""
    before = snapshot(tmp_path)
    r = cli.invoke(["plan", "--target", "qwen3-8b", "--gpu", "h100-80gb", "--url", DEAD])
    assert r.exit_code == ExitCode.RUNTIME_FAILURE, r.output
    assert "Traceback" not in r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.lower().startswith("error:")]
    assert len(lines) == 1 and f"{DEAD}: not reachable" in lines[0], r.stderr
    assert r.stdout == ""  # no plan is printed beside the failure
    assert cli.guard.events and all(e.startswith("connect") for e in cli.guard.events)  # it asked the server only
    assert snapshot(tmp_path) == before


def test_plan_file_with_rate_and_concurrency_names_its_keys(cli: Cli, tmp_path: Path) -> None:
    """The message named --rate and --concurrency, flags the user of a plan file never typed."""
    data = plan_data()
    data["traffic"][0]["concurrency"] = 2
    path = write_plan(tmp_path / "plan.yaml", data)
    r = cli.fails(["check", path, "--out", tmp_path / "out"], USAGE, "give only one of rate, concurrency, burst")
    assert "(got rate, concurrency)" in r.stderr and "--rate" not in r.stderr


def test_plan_file_without_a_stop_names_its_keys(cli: Cli, tmp_path: Path) -> None:
    data = plan_data()
    del data["traffic"][0]["num_requests"]
    path = write_plan(tmp_path / "plan.yaml", data)
    r = cli.fails(["check", path, "--out", tmp_path / "out"], USAGE, "give num_requests and/or duration_s")
    assert "--num-requests" not in r.stderr
