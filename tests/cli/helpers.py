"""Helpers of the bad-input tests: invoke the CLI in-process and check how a failure ends."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner, Result

from specguard.cli.app import app
from specguard.errors import ExitCode

USAGE = int(ExitCode.USAGE)

# The values every numeric option is fuzzed with, and what each one is.
ZERO, NEG, NAN, INF, WORD = "0", "-1", "nan", "inf", "abc"
NOT_FINITE = "expected a finite number"  # specguard's own check of a float option
PYD_NOT_FINITE = "finite number"  # pydantic's allow_inf_nan=False
NOT_A_NUMBER = "valid number"  # click/typer parsing a float option
NOT_AN_INT = "valid integer"  # click/typer parsing an int option
GT0 = "greater than 0"
GE1 = "greater than or equal to 1"


def int_fuzz(option: str, *, minimum: int = 1, prefix: tuple[str, ...] = ()) -> list[tuple[list[str], int, str]]:
    """0, -1, nan, inf and a word for an int option that must be >= ``minimum`` (0 is left out where it is valid)."""
    bound = f"greater than or equal to {minimum}"
    cases = [([*prefix, option, NEG], USAGE, bound)]
    if minimum > 0:
        cases.insert(0, ([*prefix, option, ZERO], USAGE, bound))
    cases += [([*prefix, option, v], USAGE, NOT_AN_INT) for v in (NAN, INF, WORD)]
    return cases


def case_id(case: Any) -> str:
    args = case[0] if isinstance(case, tuple) else case
    return " ".join(str(a) for a in args)[:60] if isinstance(args, list) else str(args)


@dataclass
class Guard:
    """What a command tried to do beyond parsing and validating: it must stay empty when it fails."""

    events: list[str] = field(default_factory=list)


def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory under ``root``, files by content: a failed command must leave it unchanged."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class Cli:
    def __init__(self, root: Path, guard: Guard) -> None:
        self.root = root
        self.guard = guard
        self.runner = CliRunner()

    def invoke(self, args: list[str]) -> Result:
        return self.runner.invoke(app, [str(a) for a in args])

    def fails(self, args: list[Any], code: int, fragment: str, *, as_json: bool = False) -> Result:
        """``args`` fail with ``code``, one error line holding ``fragment``, no traceback, nothing sent or written."""
        before = snapshot(self.root)
        r = self.invoke(args)
        shown = f"exit {r.exit_code}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        assert r.exit_code == code, shown
        assert "Traceback" not in r.output, shown
        lines = [ln for ln in r.stderr.splitlines() if ln.lower().startswith("error:")]
        assert len(lines) == 1, shown
        assert fragment in lines[0], f"{fragment!r} not in the error line\n{shown}"
        assert self.guard.events == [], f"it went past validation: {self.guard.events}\n{shown}"
        assert snapshot(self.root) == before, f"files changed under {self.root}\n{shown}"
        if as_json:
            out = json.loads(r.stdout)
            assert set(out) == {"error"}, shown
            assert out["error"]["exit_code"] == code, shown
            assert fragment in out["error"]["message"], shown
            assert out["error"]["code"], shown
        return r

    def ok(self, args: list[Any], *codes: int) -> Result:
        r = self.invoke(args)
        shown = f"exit {r.exit_code}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        assert r.exit_code in (codes or (0,)), shown
        assert "Traceback" not in r.output, shown
        assert self.guard.events == [], f"it sent traffic or started something: {self.guard.events}"
        return r


# --- input files that are not what they should be ----------------------------------------------

BAD_FILES = {
    "missing": (None, "not found"),
    "directory": (None, "is a directory"),
    "empty": (b"", "is empty"),
    "whitespace": (b"  \n\t\n", "is empty"),
    "bom": (b'\xef\xbb\xbf{"a": 1}\n', "byte-order mark"),
    "utf16": ('{"a": 1}\n'.encode("utf-16"), "UTF-16"),
    "binary": (b"\x00\x01\x02garbage", "binary file"),
}


def bad_file(root: Path, kind: str, name: str = "input.json") -> Path:
    """A path of the ``kind`` of :data:`BAD_FILES`, under ``root``."""
    path = root / f"{kind}-{name}"
    content, _ = BAD_FILES[kind]
    if kind == "directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    return path


# --- a bench run directory, built from the models ---------------------------------------------


def make_run(d: Path, n: int = 3, temperature: float | None = None) -> Path:
    from specguard.results.models import LoadShape, RequestRecord, RunInfo, SamplingOverrides
    from specguard.results.store import write_json_atomic

    d.mkdir(parents=True)
    info = RunInfo(
        tool_version="0",
        base_url="http://127.0.0.1:9",
        api="completions",
        model="m",
        metrics_url=None,
        prompt_source="synthetic:random",
        prompt_count=1,
        load=LoadShape(kind="concurrency", concurrency=1, num_requests=n),
        sampling=SamplingOverrides(temperature=temperature),
        started_unix=time.time(),
        started_monotonic=0.0,
        finished_unix=time.time(),
    )
    write_json_atomic(d / "run.json", info)
    with (d / "requests.jsonl").open("w") as f:
        for i in range(n):
            r = RequestRecord(
                index=0,
                seq=i,
                request_id=f"r{i}",
                segment="default",
                ok=True,
                error=None,
                http_status=200,
                scheduled_s=i,
                sent_s=i,
                send_lag_s=0,
                ttft_s=0.01 + i / 1000,
                e2e_s=0.05,
                stream_end_s=0.05,
                chunk_times_s=[0.01, 0.03, 0.05],
                chunk_tokens=[1, 1, 1],
                token_source="server_usage",
                prompt_tokens=5,
                output_tokens=3,
                finish_reason="length",
            )
            f.write(r.model_dump_json() + "\n")
    return d


# --- a check plan whose arms are endpoints nobody listens on ----------------------------------

DEAD = "http://127.0.0.1:9"


def plan_data() -> dict[str, Any]:
    return {
        "name": "t",
        "arms": {
            "baseline": {"endpoint": {"base_url": DEAD, "model": "m"}},
            "candidate": {"endpoint": {"base_url": DEAD, "model": "m"}},
        },
        "repetitions": 1,
        "warmup": 0,
        "traffic": [{"name": "steady", "rate": 4, "num_requests": 2, "target": True}],
        "sampling": [{"name": "greedy", "temperature": 0.0}],
        "prompts": [{"source": "synthetic:random", "count": 2}],
    }


def write_plan(path: Path, data: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump(data or plan_data(), sort_keys=False))
    return path


def make_check_dir(root: Path, *, complete: bool = True) -> Path:
    """check.json of a plan of one repetition and one cell, and (``complete``) a summary in every run directory."""
    from specguard.check.plan import CheckPlan
    from specguard.check.record import CheckRecord
    from specguard.results.check_dir import ARMS, CheckDir, cell_key

    root.mkdir(parents=True)
    plan = CheckPlan.model_validate(plan_data())
    record = CheckRecord(plan_path=str(root / "plan.yaml"), plan=plan, inventory={}, failures=[])
    d = CheckDir(root)
    d.check_json.write_text(record.model_dump_json(indent=2))
    if complete:
        for arm in ARMS:
            run = d.run_dir(arm, 1, cell_key("steady", "greedy", 0))
            run.mkdir(parents=True)
            (run / "summary.json").write_text("{}")
    return root
