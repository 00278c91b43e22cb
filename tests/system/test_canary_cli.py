"""``specguard canary`` as an operator runs it: the console script in a process, in front of scripted servers.

The contract of the issue: ``canary run`` serves the proxy on ``listen`` and the admin API on
``admin.listen``; ``canary status --state FILE --json`` prints ``weight``, ``step``, ``state`` and
``decisions`` (each with ``time``, ``kind``, ``reasons``); the manual commands and SIGTERM exit with the
shared table's codes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from specguard.canary.state.store import CanaryStore
from tests.canary_harness import TOKEN, TOKEN_ENV, drive, user_keys, write_rollout
from tests.helpers import sigint_default

NOISY = {"ttft_ms": 40.0, "interval_ms": 20.0, "chunks": 8, "jitter": 0.12}
ANALYSIS = {
    "window_s": 1.0,
    "min_samples": 10,
    "promote_windows": 2,
    "metrics": [{"metric": "itl_ms", "percentile": "p99", "budget": 0.10}, {"metric": "error_rate", "budget": 0.005}],
}


def specguard(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", *args], capture_output=True, text=True, timeout=timeout, env=env or os.environ.copy()
    )


def with_token() -> dict[str, str]:
    return {**os.environ, TOKEN_ENV: TOKEN}


def start(rollout: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "specguard", "canary", "run", str(rollout), *extra],
        env=with_token(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )


def wait_serving(proc: subprocess.Popen[str], state: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        if state.exists():
            with CanaryStore.open_existing(state) as store:
                if any(e.kind == "started" for e in store.events()):
                    return
        time.sleep(0.1)
    raise AssertionError("canary run did not start")


def status(state: Path) -> dict:
    r = specguard("canary", "status", "--state", str(state), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def pools(scripted) -> dict[str, list[str]]:
    return {"baseline": [scripted(**NOISY, seed=1).base_url], "candidate": [scripted(**NOISY, seed=2).base_url]}


def test_a_rollout_promotes_itself_and_status_events_and_report_say_how(pools, tmp_path: Path) -> None:
    rollout = write_rollout(
        tmp_path,
        pools,
        steps=[{"percent": 50, "min_time_s": 2, "min_requests": 5}, {"percent": 100, "min_time_s": 2, "min_requests": 5}],
        analysis=ANALYSIS,
    )
    state = tmp_path / "state.sqlite"
    proc = start(rollout, "--exit-when-finished", "--json")
    wait_serving(proc, state)
    listen = yaml.safe_load(rollout.read_text())["listen"]

    async def load() -> None:
        stop = asyncio.Event()
        task = asyncio.ensure_future(drive(f"http://{listen}", requests=20_000, concurrency=8, keys=user_keys(400), stop=stop))
        while proc.poll() is None:
            await asyncio.sleep(0.2)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(load(), 90))
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    doc = status(state)
    assert doc["state"] == "promoted" and doc["weight"] == 100.0 and doc["step"] == 1
    kinds = [d["kind"] for d in doc["decisions"]]
    assert "advance" in kinds and kinds[-1] == "promote"
    assert all({"time", "kind", "reasons"} <= d.keys() and d["reasons"] for d in doc["decisions"])
    events = specguard("canary", "events", "--state", str(state), "--json")
    assert events.returncode == 0
    lines = [json.loads(line) for line in events.stdout.splitlines()]
    assert [e["seq"] for e in lines] == list(range(len(lines)))
    jsonl = Path(f"{state}.events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in jsonl] == lines, "the JSONL log and SQLite agree"
    # run --json printed each event as it was appended: the same objects, one per line, nothing else on stdout
    assert [json.loads(line) for line in stdout.splitlines()] == lines
    out = tmp_path / "report"
    r = specguard("canary", "report", str(state), "--out", str(out))
    assert r.returncode == 0, r.stderr
    md = (out / "report.md").read_text()
    assert "promote" in md and "50" in md
    again = specguard("canary", "report", str(state), "--out", str(out))
    assert again.returncode == 2 and "exist" in again.stderr, "no overwrite without --force"


def test_manual_control_sigterm_and_resume_exit_with_the_shared_codes(pools, tmp_path: Path) -> None:
    rollout = write_rollout(tmp_path, pools, analysis=ANALYSIS)
    state = tmp_path / "state.sqlite"
    proc = start(rollout)
    try:
        wait_serving(proc, state)
        paused = specguard("canary", "pause", str(rollout), env=with_token())
        assert paused.returncode == 0, paused.stderr
        assert "paused" in paused.stdout
        again = specguard("canary", "pause", str(rollout), "--json", env=with_token())
        assert again.returncode == 1 and "already paused" in again.stderr
        refused = json.loads(again.stdout)["error"]  # --json: a refusal in the shape of a failure, with its exit code
        assert refused["exit_code"] == 1 and "already paused" in refused["message"]
        wrong = specguard("canary", "resume", str(rollout), env={**os.environ, TOKEN_ENV: "not-the-token"})
        assert wrong.returncode == 2 and "not-the-token" not in wrong.stderr
        assert status(state)["state"] == "paused"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "resume" in stderr
    with CanaryStore.open_existing(state) as store:
        assert store.events()[-1].kind == "stopped"
    unreachable = specguard("canary", "resume", str(rollout), env=with_token())
    assert unreachable.returncode == 4 and "no canary controller answers" in unreachable.stderr
    # Restarted, it resumes paused at the same weight.
    proc = start(rollout)
    try:
        wait_serving(proc, state)
        time.sleep(0.5)
        doc = status(state)
        assert doc["state"] == "paused" and doc["weight"] == 1.0
        resumed = specguard("canary", "resume", str(rollout), "--json", env=with_token())
        assert resumed.returncode == 0, resumed.stderr
        assert json.loads(resumed.stdout)["state"] != "paused"  # --json: the controller's answer
        rolled = specguard("canary", "rollback", str(rollout), env=with_token())
        assert rolled.returncode == 0 and "rolled_back at 0 %" in rolled.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert status(state)["state"] == "rolled_back"


def test_bad_input_is_refused_before_anything_listens(pools, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "pools:\n  baseline: {servers: [http://127.0.0.1:1]}\n  candidate: {servers: [http://127.0.0.1:2]}\n"
        "admin:\n  token_env: T\nsteps: [5, 50]\n"
    )
    r = specguard("canary", "run", str(bad))
    assert r.returncode == 2 and "bad.yaml:6:" in r.stderr and "steps" in r.stderr and "100 %" in r.stderr
    rollout = write_rollout(tmp_path, pools)
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    r = specguard("canary", "run", str(rollout), env=env)
    assert r.returncode == 2 and TOKEN_ENV in r.stderr
    assert not (tmp_path / "state.sqlite").exists(), "nothing written before the token was found"
    r = specguard("canary", "status", "--state", str(tmp_path / "nope.sqlite"), "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["exit_code"] == 2
    # A Gateway engine judged through Prometheus: its token variable unset is refused before anything is written.
    gateway = tmp_path / "gateway.yaml"
    doc = {k: v for k, v in yaml.safe_load(rollout.read_text()).items() if k not in ("listen", "split")}
    doc["engine"] = {
        "type": "gateway-api",
        "route": "r",
        "namespace": "n",
        "gateway": {"name": "g"},
        "backends": {
            "baseline": {"kind": "Service", "name": "b", "port": 8000},
            "candidate": {"kind": "InferencePool", "name": "c"},
        },
    }
    doc["metrics"] = {"source": "prometheus", "url": "http://127.0.0.1:9", "token_env": "SG_TEST_PROM_TOKEN"}
    gateway.write_text(yaml.safe_dump(doc))
    r = specguard("canary", "run", str(gateway), env=with_token())
    assert r.returncode == 2 and "metrics.token_env" in r.stderr and "SG_TEST_PROM_TOKEN" in r.stderr, r.stderr
    assert not (tmp_path / "state.sqlite").exists()


def test_units_contract_for_the_fleet_example(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    vllm = tmp_path / "vllm"
    vllm.write_text("#!/bin/sh\necho 0.11.0\n")
    vllm.chmod(0o755)
    out = tmp_path / "units"
    r = specguard(
        "canary",
        "units",
        str(root / "examples" / "rollout-gpu-fleet.yaml"),
        "--out",
        str(out),
        "--vllm-bin",
        str(vllm),
        "--vllm-version",
        "0.11.0",
    )
    assert r.returncode == 0, r.stderr
    names = {p.name for p in out.iterdir()}
    assert {"vllm-target-baseline.service", "vllm-target-speculative.service", "RUNBOOK.md"} <= names
    runbook = (out / "RUNBOOK.md").read_text()
    assert "systemctl stop vllm-target-speculative.service" in runbook
    again = specguard(
        "canary", "units", str(root / "examples" / "rollout-gpu-fleet.yaml"), "--out", str(out), "--vllm-bin", str(vllm)
    )
    assert again.returncode == 2, "no overwrite without --force"
