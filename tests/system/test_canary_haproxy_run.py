"""``canary run`` with ``engine: haproxy``, end to end: the real HAProxy (Debian's) carries every request, and
specguard only drives its weights over the runtime socket and judges the pools on what they count themselves.

Behind HAProxy specguard sees no request; a window's evidence is the pools' servers' latency histograms (the
scripted servers expose vLLM's, on vLLM 0.32's bucket bounds, observed as vLLM observes them) and HAProxy's
per-server response counters. Scripted servers (fakes) because the candidate's slowdown must be exact; the
HAProxy engine in front of real vLLM servers is tested in test_canary_haproxy_vllm.py.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from specguard.canary.judge.histogram_judge import HISTOGRAM_DEFINITIONS
from specguard.canary.routers.haproxy import HAProxyRouter
from specguard.canary.spec.rollout import load_rollout
from specguard.errors import RuntimeFailure
from specguard.report.build.canary import read_canary_report_data
from specguard.scripted.process import ScriptedProcess
from specguard.vllm.process import free_port
from tests.canary_harness import TOKEN, TOKEN_ENV, CanaryRun, drive, running, wait_until
from tests.haproxy_harness import HAProxyProcess, engine_of

# 8 chunks of 20 ms after a 40 ms TTFT, with 12 % log-normal noise on every gap (as test_canary_faults)
NOISY = {"ttft_ms": 40.0, "interval_ms": 20.0, "chunks": 8, "jitter": 0.12}
# ITL at p95, not the default p99 and not per request: a histogram percentile needs 5 observations beyond it
# per pool and window, and a 4 s window of this load holds ~500 ITL but ~75 E2E observations per pool (266 and
# 38 in 2 s windows were too few for p99)
LATENCY_ONLY = [
    {"metric": "itl_ms", "percentile": "p95", "budget": 0.10},
    {"metric": "error_rate", "budget": 0.005},
]


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Not tmp_path: a UNIX socket path is at most 107 bytes, and pytest's directories can be longer.
    with tempfile.TemporaryDirectory(prefix="sg-hap-") as d:
        yield Path(d)


def haproxy_rollout(tmp: Path, socket: Path, servers: dict[str, ScriptedProcess], **sections: Any) -> Path:
    doc: dict[str, Any] = {
        "name": "haproxy-canary",
        "engine": {
            "type": "haproxy",
            "socket": str(socket),
            "backend": "vllm",
            "baseline_servers": ["baseline-1"],
            "candidate_servers": ["speculative-1"],
            "drain": True,
        },
        "pools": {pool: {"servers": [proc.base_url]} for pool, proc in servers.items()},
        "admin": {"listen": f"127.0.0.1:{free_port()}", "token_env": TOKEN_ENV},
        "state": {"path": str(tmp / "state.sqlite")},
        **sections,
    }
    path = tmp / "rollout.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def decisions(run: CanaryRun, kind: str) -> list[Any]:
    return [e for e in run.events("decision") if e.decision == kind]


async def test_a_slower_candidate_behind_haproxy_is_rolled_back_on_its_servers_histograms(
    scripted: Any, socket_dir: Path, tmp_path: Path
) -> None:
    servers = {"baseline": scripted(**NOISY, seed=1), "candidate": scripted(**(NOISY | {"interval_ms": 30.0}), seed=2)}
    path = haproxy_rollout(
        tmp_path,
        socket_dir / "admin.sock",
        servers,
        steps=[{"percent": 50, "min_time_s": 60, "min_requests": 10}, {"percent": 100}],
        analysis={"window_s": 4.0, "metrics": LATENCY_ONLY, "min_samples": 20, "rollback_windows": 2},
    )
    rollout = load_rollout(path)
    haproxy = HAProxyProcess(rollout, tmp_path / "haproxy")
    haproxy.__enter__()
    try:
        async with running(CanaryRun(path, tmp_path / "logs", exit_when_finished=False)) as run:
            stop = asyncio.Event()
            load = asyncio.ensure_future(drive(haproxy.base_url, requests=4000, concurrency=12, stop=stop))
            await wait_until(run, lambda: decisions(run, "rollback"), 60)
            # after the rollback, HAProxy sends nothing new to the speculative server
            states = await HAProxyRouter(engine_of(rollout)).read_back()
            # No proxy runs, yet the admin API exports the controller's series (issue 28: its registry was empty).
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession() as s, s.get(f"http://{rollout.admin.listen}/metrics", headers=headers) as resp:
                exported = await resp.text()
            stop.set()
            tally = await load
            outcome = await run.stopped()
    finally:
        haproxy.stop()
    assert outcome.status == "rolled_back"
    for line in ('specguard_canary_decisions_total{kind="rollback"} 1.0', "specguard_canary_candidate_weight 0.0"):
        assert line in exported.splitlines(), exported
    assert 'specguard_canary_events_total{kind="window"}' in exported and "specguard_canary_window_value{" in exported
    assert states["speculative-1"].weight == 0 and states["speculative-1"].draining
    assert states["baseline-1"].weight > 0
    windows = run.events("window")
    [rollback] = decisions(run, "rollback")
    judged = [w for w in windows if w.time <= rollback.time]
    assert 2 <= len(judged) <= 3, f"rolled back after {len(judged)} windows; N = 2"
    for w in judged:
        analysis = w.details["analysis"]
        assert analysis["source"] == "server_histograms", analysis
        # HAProxy's own response counts: both pools served in every judged window, none of them a 5xx
        assert w.details["counts"]["baseline"] > 0 and w.details["counts"]["candidate"] > 0, w.details["counts"]
    failing = [r for r in judged[-1].details["analysis"]["results"] if r["verdict"] == "FAIL"]
    assert any(r["metric"].endswith("itl_ms") for r in failing), failing
    assert any("itl" in r for r in rollback.reasons), rollback.reasons
    assert tally.failed == 0, tally.errors[:3]
    # the report says what the windows were judged on, and how
    report = read_canary_report_data(Path(run.rollout.state.path))
    assert report.definitions["source"] == HISTOGRAM_DEFINITIONS["source"]
    assert "window distribution" in report.definitions and "step points" in report.definitions


async def test_an_equal_candidate_behind_haproxy_is_promoted_and_haproxy_carries_its_share(
    scripted: Any, socket_dir: Path, tmp_path: Path
) -> None:
    servers = {"baseline": scripted(**NOISY, seed=1), "candidate": scripted(**NOISY, seed=2)}
    path = haproxy_rollout(
        tmp_path,
        socket_dir / "admin.sock",
        servers,
        steps=[{"percent": 25, "min_time_s": 4, "min_requests": 10}, {"percent": 100, "min_time_s": 4, "min_requests": 10}],
        analysis={"window_s": 4.0, "metrics": LATENCY_ONLY, "min_samples": 20, "promote_windows": 2},
    )
    rollout = load_rollout(path)
    haproxy = HAProxyProcess(rollout, tmp_path / "haproxy")
    haproxy.__enter__()
    driver = HAProxyRouter(engine_of(rollout))
    try:
        async with running(CanaryRun(path, tmp_path / "logs", exit_when_finished=True)) as run:
            first = await driver.read_back()
            stop = asyncio.Event()
            load = asyncio.ensure_future(drive(haproxy.base_url, requests=4000, concurrency=12, stop=stop))
            outcome = await run.finish(90)
            stop.set()
            tally = await load
            last = await driver.read_back()
    finally:
        haproxy.stop()
    assert outcome.status == "promoted", run.lines[-5:]
    # the first step's weights as HAProxy took them: a quarter of new requests to the speculative server
    w = {name: s.weight for name, s in first.items()}
    assert w["speculative-1"] / (w["speculative-1"] + w["baseline-1"]) == pytest.approx(0.25)
    assert last["baseline-1"].weight == 0 and last["speculative-1"].weight > 0
    assert [e.decision for e in run.events("decision")].count("advance") == 1
    assert all(w.details["analysis"]["source"] == "server_histograms" for w in run.events("window"))
    assert tally.failed == 0, tally.errors[:3]


async def test_a_wrong_runtime_socket_exits_without_a_state_that_claims_a_start(
    scripted: Any, socket_dir: Path, tmp_path: Path
) -> None:
    """Issue 28: the engine never confirmed the first weights, so the state file records no start (it said "started
    at 25 %" with no weight applied)."""
    pools = {"baseline": scripted(**NOISY), "candidate": scripted(**NOISY)}
    path = haproxy_rollout(tmp_path, socket_dir / "no-such.sock", pools)
    run = CanaryRun(path, tmp_path / "logs", exit_when_finished=False)
    run.start()
    assert run.task is not None
    with pytest.raises(RuntimeFailure, match="no-such.sock"):
        await asyncio.wait_for(run.task, 30)
    with run.store() as store:
        assert store.load_state() is None
        assert store.events() == []


async def test_the_engine_is_read_back_every_window_drift_is_reapplied_and_a_lost_engine_pauses(
    scripted: Any, socket_dir: Path, tmp_path: Path
) -> None:
    """Issue 28, against the real HAProxy: restarted under a running canary it comes back with its configuration's
    weights (the speculative server at 0) and the next window puts the step's weights back (a ``drift`` event);
    killed, the rollout pauses with an ``engine`` event (no exit 4); back again, the candidate is set to 0 % and the
    rollout stays paused until the operator resumes."""
    servers = {"baseline": scripted(**NOISY, seed=1), "candidate": scripted(**NOISY, seed=2)}
    path = haproxy_rollout(
        tmp_path,
        socket_dir / "admin.sock",
        servers,
        steps=[{"percent": 25, "min_time_s": 3600}, {"percent": 100}],
        analysis={"window_s": 1.0, "metrics": LATENCY_ONLY, "min_samples": 20},
    )
    rollout = load_rollout(path)
    router = HAProxyRouter(engine_of(rollout))

    def share(states: dict[str, Any]) -> float:
        w = {name: s.weight for name, s in states.items()}
        return w["speculative-1"] / max(1, w["speculative-1"] + w["baseline-1"])

    haproxy = HAProxyProcess(rollout, tmp_path / "haproxy-1")
    haproxy.__enter__()
    try:
        async with running(CanaryRun(path, tmp_path / "logs", exit_when_finished=False)) as run:
            await wait_until(run, lambda: run.events("window"), 20)
            haproxy.stop()
            haproxy = HAProxyProcess(rollout, tmp_path / "haproxy-2")
            haproxy.__enter__()
            restarted = share(await router.read_back())
            await wait_until(run, lambda: run.events("drift"), 20)
            assert share(await router.read_back()) == pytest.approx(0.25)
            haproxy.stop()
            await wait_until(run, lambda: run.events("engine"), 20)
            with run.store() as store:
                paused = store.load_state()
            haproxy = HAProxyProcess(rollout, tmp_path / "haproxy-3")
            haproxy.__enter__()
            await wait_until(run, lambda: len(run.events("engine")) == 2, 20)
            after = await router.read_back()
    finally:
        haproxy.stop()
    assert restarted != pytest.approx(0.25), "a restarted HAProxy has its configuration's weights, not the step's"
    [drift] = run.events("drift")
    assert "speculative-1 weight" in drift.reasons[0], drift.reasons
    lost, back = run.events("engine")
    assert "cannot be reached" in lost.reasons[0] and paused is not None and paused.status == "paused"
    assert "answers again" in back.reasons[0] and after["speculative-1"].weight == 0
