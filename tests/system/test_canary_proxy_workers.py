"""``workers: 2`` (issue 28 section 7): two proxy processes on one port with SO_REUSEPORT, in front of scripted servers.

Checked at both ends: every request the client sent is in the controller's records exactly once, both processes
served some (worker k numbers its requests k, k + 2, ...: ``seq % 2``), each keyed request went to the pool its key
hashes to at the weights in effect (control pool included), a rollback reaches both processes before the admin call
returns, a SIGTERM drains both under the one deadline with the cut streams counted, a worker that dies is an engine
failure the controller reports, and a controller killed with SIGKILL leaves no worker behind.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
import yaml

from specguard.canary.proxy.server import CUT_AT_SHUTDOWN
from specguard.canary.proxy.split import choose_pool, key_hash
from specguard.canary.state.store import CanaryStore
from tests.canary_harness import TOKEN, TOKEN_ENV, CanaryRun, drive, running, user_keys, write_rollout
from tests.helpers import descendants, wait_gone

# Short streams for the traffic (max_tokens 4: 4 chunks, ~0.1 s), long ones for the drain (max_tokens 100: ~2 s).
SCRIPT = {"ttft_ms": 20.0, "interval_ms": 20.0, "chunks": 100}
QUIET = {"window_s": 60.0, "min_samples": 10}  # no window closes during the test: only the test moves the weights


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def key_of(request_id: str) -> str:
    return request_id.split("-", 2)[2]  # drive's ids are TAG-I-KEY


async def test_two_workers_split_alike_report_every_request_once_and_drain_together(scripted, tmp_path: Path) -> None:
    pools = {name: [scripted(**SCRIPT).base_url] for name in ("baseline", "candidate", "control")}
    rollout = write_rollout(tmp_path, pools, workers=2, steps=[25, 100], analysis=QUIET)
    keys = user_keys(120, seed=28)
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False, drain_s=0.5)) as run:
        before = await drive(run.url, requests=240, concurrency=16, keys=keys, max_tokens=4, tag="before")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession() as s, s.post(f"{run.admin_url}/rollback", headers=headers) as r:
            assert r.status == 200, await r.text()
        after = await drive(run.url, requests=120, concurrency=16, keys=keys, max_tokens=4, tag="after")
        # Streams of ~2 s, still running when SIGTERM's 0.5 s drain ends: each process cuts its own.
        slow = asyncio.ensure_future(drive(run.url, requests=8, concurrency=8, max_tokens=100, tag="slow"))
        await asyncio.sleep(0.5)
        await run.stopped()
        cut_tally = await slow
    assert any(" in 2 processes (workers: pids [" in line for line in run.lines), run.lines
    assert before.ok == before.sent == 240 and after.ok == after.sent == 120, (before.errors, after.errors)
    with run.store() as store:
        records = [r for r in store.requests() if not r.retried]
    [stopped] = run.events("stopped")
    count = collections.Counter(r.request_id for r in records)
    sent = before.request_ids + after.request_ids + cut_tally.request_ids
    assert count == collections.Counter(sent), "every request in the controller's records, once"
    served = {tag: {r.seq % 2 for r in records if r.request_id.startswith(tag)} for tag in ("before", "after")}
    assert served == {"before": {0, 1}, "after": {0, 1}}, "both processes served, before and after the rollback"
    for r in records:
        if r.request_id.startswith("before"):
            assert r.pool == choose_pool(key_hash(key_of(r.request_id)), 0.25, 0.5, 0.25), r
        elif r.request_id.startswith("after"):
            assert r.pool == "baseline", r  # the rollback reached both processes before the admin call returned
    assert {r.pool for r in records if r.request_id.startswith("before")} == {"baseline", "candidate", "control"}
    cut = [r for r in records if r.error == CUT_AT_SHUTDOWN]
    assert len(cut) == 8 and cut_tally.failed == 8 and {r.seq % 2 for r in cut} == {0, 1}
    assert stopped.details["cut_at_shutdown"] == 8 and "8 stream(s) cut at shutdown" in stopped.reasons[0]


def test_a_dead_worker_is_an_engine_failure_and_a_killed_controller_leaves_no_worker(scripted, tmp_path: Path) -> None:
    """``canary run`` as a process with ``workers: 3``. A worker killed with SIGKILL is reported as HAProxy unreachable
    is: the next read-back cannot ask it, and the rollout pauses naming the process, while the others serve on. Then
    the controller itself is killed with SIGKILL: no worker outlives it."""
    pools = {name: [scripted(**SCRIPT).base_url] for name in ("baseline", "candidate")}
    rollout = write_rollout(tmp_path, pools, workers=3, analysis={"window_s": 1.0, "min_samples": 10})
    state = tmp_path / "state.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", "canary", "run", str(rollout)],
        env={**os.environ, TOKEN_ENV: TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        doc = yaml.safe_load(rollout.read_text())
        workers = _workers_of(proc, 2, doc["admin"]["listen"])
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        reasons = _engine_event(proc, state)
        assert re.search(rf"proxy worker \d \(pid {victim}\) exited with code -9", reasons), reasons
        assert reasons.endswith("paused"), reasons
        tally = asyncio.run(drive(f"http://{doc['listen']}", requests=20, concurrency=4, max_tokens=4, tag="after"))
        assert tally.ok == tally.sent == 20, tally.errors  # the controller's process and the live worker serve on
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        assert not wait_gone(workers - {victim}, 15), "a proxy worker outlived its controller"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _workers_of(proc: subprocess.Popen[str], count: int, admin: str) -> set[int]:
    """The worker processes, once the admin API answers (it listens after every worker has said it listens)."""
    deadline = time.monotonic() + 60
    request = urllib.request.Request(f"http://{admin}/status", headers={"Authorization": f"Bearer {TOKEN}"})
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "canary run did not come up"
        try:
            with urllib.request.urlopen(request, timeout=5) as r:  # noqa: S310  loopback, the test's own address
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    workers = {p for p in descendants(proc.pid) if b"specguard.canary.proxy.worker" in _cmdline(p)}
    assert len(workers) == count, workers
    return workers


def _engine_event(proc: subprocess.Popen[str], state: Path) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        with CanaryStore.open_existing(state) as store:
            events = store.events(kinds=["engine"])
        if events:
            return events[0].reasons[0]
        time.sleep(0.2)
    raise AssertionError("no engine event after a worker died")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
