"""The canary under injected faults, with the scripted servers where timing must be controlled.

Each test runs the real controller, proxy, admin API and SQLite state on the test's loop, in front of
scripted servers in their own processes, and counts requests at both ends. Windows are 1-2 s so that a
rollout of several windows takes seconds; the budgets are the defaults' (10 % on P99 latencies).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from specguard.canary.judge.policy import analysis_policy, samples_by_segment
from specguard.canary.judge.window import analyse_window
from specguard.canary.proxy.server import CUT_AT_SHUTDOWN
from specguard.errors import ServerError
from specguard.vllm.process import free_port
from tests.canary_harness import TOKEN, TOKEN_ENV, CanaryRun, drive, running, user_keys, wait_until, write_rollout

# 8 chunks of 20 ms after a 40 ms TTFT: a request takes ~0.2 s; with 12% log-normal noise on every gap
NOISY = {"ttft_ms": 40.0, "interval_ms": 20.0, "chunks": 8, "jitter": 0.12}
LATENCY_ONLY = [
    {"metric": "itl_ms", "percentile": "p99", "budget": 0.10},
    {"metric": "e2e_ms", "percentile": "p99", "budget": 0.10},
    {"metric": "error_rate", "budget": 0.005},
]


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def analysis(window_s: float, **kw: object) -> dict[str, object]:
    return {"window_s": window_s, "metrics": LATENCY_ONLY, "min_samples": 20} | kw


def decisions(run: CanaryRun, kind: str) -> list[object]:
    return [e for e in run.events("decision") if e.decision == kind]


async def test_a_20_percent_itl_regression_is_rolled_back_within_n_plus_1_windows(scripted, tmp_path: Path) -> None:
    base = scripted(**NOISY, seed=1)
    cand = scripted(**(NOISY | {"interval_ms": 24.0}), seed=2)
    rollout = write_rollout(
        tmp_path,
        {"baseline": [base.base_url], "candidate": [cand.base_url]},
        steps=[{"percent": 50, "min_time_s": 60, "min_requests": 10}, {"percent": 100}],
        analysis=analysis(3.0, rollback_windows=2),
    )
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as run:
        stop = asyncio.Event()
        # 3 s windows: ~90 requests per arm and window. With 2 s (~60 per arm) a landing CI run on the busy
        # 2-core machine once needed 4 windows (one window did not fail; which verdict it had was not
        # recorded, hence the message below). More streams instead put more noise on this loop.
        load = asyncio.ensure_future(drive(run.url, requests=3000, concurrency=12, keys=user_keys(500), stop=stop))
        await wait_until(run, lambda: decisions(run, "rollback"), 40)
        stop.set()
        tally = await load
        outcome = await run.stopped()
    assert outcome.status == "rolled_back"
    windows = run.events("window")
    [rollback] = decisions(run, "rollback")
    judged = [w for w in windows if w.time <= rollback.time]
    looks = [(w.reasons, w.details["counts"]) for w in judged]
    assert len(judged) <= 2 + 1, f"rolled back after {len(judged)} windows; N = 2: {looks}"
    # The regression is in the inter-token gaps, which per-token ITL and E2E both carry; either may be the
    # metric that fails last (under CPU contention E2E did, with ITL's p99 set by scheduling stalls).
    assert any("itl" in r or "e2e" in r for r in rollback.reasons[1:]), rollback.reasons
    assert tally.failed == 0, tally.errors[:3]


async def test_a_5xx_burst_rolls_back_at_once(scripted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = scripted(**NOISY)
    cand = scripted(**NOISY, fault="http_500")
    # The rollback hooks print their environment and the admin token: they get an explicit environment (issue 28).
    monkeypatch.setenv("SPECGUARD_TEST_PASSED", "listed-under-hooks-env")
    monkeypatch.setenv("SPECGUARD_TEST_NOT_PASSED", "anything-else")
    leaked = tmp_path / "found-elsewhere.txt"  # a hook that prints a token it found: redacted before it is stored
    leaked.write_text(f"the token is {TOKEN}\n")
    rollout = write_rollout(
        tmp_path,
        {"baseline": [base.base_url], "candidate": [cand.base_url]},
        steps=[{"percent": 50}, {"percent": 100}],
        analysis=analysis(30.0, critical={"http_5xx_burst": {"count": 5, "within_s": 10}}),
        hooks={"rollback": [["env"], ["cat", str(leaked)]], "env": ["SPECGUARD_TEST_PASSED"]},
    )
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as run:
        stop = asyncio.Event()
        load = asyncio.ensure_future(drive(run.url, requests=400, concurrency=8, keys=user_keys(100), stop=stop))
        await wait_until(run, lambda: decisions(run, "rollback"), 25)
        stop.set()
        tally = await load
        outcome = await run.stopped()
    assert outcome.status == "rolled_back"
    assert run.events("window") == [], "rolled back before the first 30 s window closed"
    [rollback] = decisions(run, "rollback")
    assert any("5xx" in r or "http_5xx_burst" in r for r in rollback.reasons), rollback.reasons
    # Every candidate 500 came before the first byte: retried on the baseline, so the clients saw none.
    assert tally.failed == 0 and tally.status == {200: tally.sent}
    env_hook, echo_hook = (e.details["stdout"] for e in run.events("hook"))
    variables = dict(line.split("=", 1) for line in env_hook.splitlines())
    assert variables["SPECGUARD_HOOK"] == "rollback" and variables["SPECGUARD_PERCENT"] == "50", variables
    assert variables["SPECGUARD_TEST_PASSED"] == "listed-under-hooks-env" and "PATH" in variables
    assert TOKEN_ENV not in variables and "SPECGUARD_TEST_NOT_PASSED" not in variables, sorted(variables)
    assert echo_hook == "the token is [redacted]\n"
    with run.store() as store:
        mirror = store.events_path.read_text()
    assert TOKEN not in mirror and TOKEN not in Path(run.rollout.state.path).read_bytes().decode("latin-1")


async def test_a_candidate_killed_mid_stream_loses_and_duplicates_nothing(scripted, tmp_path: Path) -> None:
    slow = {"ttft_ms": 30.0, "interval_ms": 40.0, "chunks": 40}  # 1.6 s streams: many in flight at the kill
    base = scripted(**slow)
    cand = scripted(**slow)
    rollout = write_rollout(
        tmp_path,
        {"baseline": [base.base_url], "candidate": [cand.base_url]},
        steps=[{"percent": 50}, {"percent": 100}],
        analysis=analysis(4.0),  # /metrics read every second: the crash shows there as well as in the streams
    )
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as run:
        load = asyncio.ensure_future(drive(run.url, requests=120, concurrency=16, max_tokens=40))
        await asyncio.sleep(2.5)
        assert cand.proc is not None
        os.killpg(cand.proc.pid, signal.SIGKILL)
        tally = await load
        outcome = await run.stopped()
    assert outcome.status == "rolled_back"
    with run.store() as store:
        records = store.requests()
    served = [r for r in records if not r.retried]
    assert tally.sent == 120 and len(served) == tally.sent, "one final record per client request"
    assert len({r.request_id for r in served}) == len(served), "no request served twice"
    broken = [r for r in served if r.pool == "candidate" and not r.ok]
    assert broken, "streams in flight on the killed candidate are its errors"
    assert tally.failed == len([r for r in served if not r.ok]), "each client error is one pool error"
    retried = [r for r in records if r.retried]
    for r in retried:
        assert r.pool == "candidate" and r.http_status is None, "refused before the first byte"
        [second] = [s for s in served if s.request_id == r.request_id]
        assert second.pool == "baseline" and second.attempt == 2
    kinds = {e.details.get("kind") for e in run.events("critical")}
    assert "stream_error_burst" in kinds or "crash" in kinds, kinds
    [rollback] = decisions(run, "rollback")


async def _equal_pools(
    scripted, tmp_path: Path, weight: float, windows: int, load_ms: float, phases: list[tuple[int, float]], control: bool = False
) -> tuple[CanaryRun, object]:
    """Pools running the same script, ``windows`` windows of 1 s under load that cycles through ``phases``
    (concurrency, seconds)."""
    pools = {
        name: [scripted(**NOISY, load_ms_per_stream=load_ms, seed=seed).base_url]
        for name, seed in (("baseline", 3), ("candidate", 4))
    }
    if control:
        pools["control"] = [scripted(**NOISY, load_ms_per_stream=load_ms, seed=5).base_url]
    rollout = write_rollout(
        tmp_path,
        pools,
        steps=[{"percent": weight, "min_time_s": 3600, "min_requests": 10**6}, {"percent": 100}],
        analysis=analysis(1.0, min_samples=10, max_looks=windows),
    )
    keys = user_keys(2000)
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as run:
        n = 0
        while len(run.events("window")) < windows:
            for concurrency, seconds in phases:
                stop = asyncio.Event()
                load = asyncio.ensure_future(
                    drive(run.url, requests=100_000, concurrency=concurrency, keys=keys, stop=stop, tag=f"p{n}")
                )
                await asyncio.sleep(seconds)
                stop.set()
                assert (await load).failed == 0
                n += 1
        outcome = await run.stopped()
    return run, outcome


async def test_equal_pools_with_noise_for_30_windows_do_not_roll_back(scripted, tmp_path: Path, record_property) -> None:
    run, outcome = await _equal_pools(scripted, tmp_path, weight=50, windows=30, load_ms=0.0, phases=[(16, 5.0)])
    windows = run.events("window")
    verdicts = [w.details["analysis"]["verdict"] for w in windows]
    failed = verdicts.count("FAIL")
    record_property("failing_windows_of_30", failed)
    print(f"equal pools: {failed} failing windows of {len(windows)}; verdicts {verdicts}")
    assert outcome.status != "rolled_back"
    assert decisions(run, "rollback") == []
    # Most windows had the samples to judge: their tests ran (a window may still hold because a 1 s window of
    # ~20 requests per pool has too little power to see +10 %: issue 26's power rule; it never passes then).
    judged = [w for w in windows if any(r["p_value"] is not None for r in w.details["analysis"]["results"])]
    assert len(judged) > len(windows) // 2, "most windows had the samples to judge"


async def test_at_a_twentieth_of_the_load_the_matched_comparison_matters(scripted, tmp_path: Path) -> None:
    """Three pools running the same script, whose latency grows 4 ms per gap for each other stream in flight,
    under a steady 16 streams; the candidate and a control replica get 5 % each.

    The candidate serves about one stream at a time while the baseline serves ~14, so compared as they come
    the candidate looks several times faster: a regression of its own would hide behind that, and a
    promotion would rest on it. Against the control pool (Kayenta's new baseline, at the candidate's load)
    the pools compare as the equals they are. Without a control, the in-flight strata of the two pools do
    not overlap, and the stratified comparison says it cannot judge instead of flattering the candidate.
    """
    run, _ = await _equal_pools(scripted, tmp_path, weight=5, windows=12, load_ms=4.0, phases=[(16, 4.0)], control=True)
    assert {w.details["analysis"]["comparison"] for w in run.events("window")} == {"control"}
    with run.store() as store:
        records = store.requests()
    policy = analysis_policy(run.rollout).model_copy(update={"min_samples": 10, "max_looks": 1})

    def p99_itl(result: object) -> object:
        return next(r for r in result.results if r.metric == "p99_itl_ms")

    with_control = samples_by_segment(records, with_control=True)
    naive = p99_itl(analyse_window(policy, with_control, 1, matching="naive"))
    matched = p99_itl(analyse_window(policy, with_control, 1))
    no_control = samples_by_segment([r for r in records if r.pool != "control"], with_control=False)
    stratified = analyse_window(policy, no_control, 1)
    print(f"naive: {naive.text}\ncontrol: {matched.text}\nstratified: {p99_itl(stratified).text} {stratified.warnings}")
    assert naive.ratio is not None and naive.ratio.ratio < 0.75, "naively, the lightly loaded candidate looks faster"
    assert matched.comparison == "control" and matched.ratio is not None
    # Equal pools: the point lies within the naive flattery's factor of 1 either way. Not "the interval holds 1":
    # a bootstrap interval of a p99 over ~1 stream per pool and window misses the truth more often than its
    # level says (1.079 [1.001, 1.200] in one CI run; 0.83 [0.74, 1.27] in 1 of 9 local runs), so that
    # assertion fails by chance rather than by a fault.
    assert 0.75 < matched.ratio.ratio < 1 / 0.75, matched.text
    # Not significantly worse; it passes only where the window had the power to see +10 % (issue 26's power rule:
    # the ~25 streams a pool gets here give about 30 %, so this window holds rather than passes).
    assert matched.verdict != "FAIL" and matched.power is not None, matched.text
    assert (matched.verdict == "PASS") == (matched.power >= policy.min_power), matched.text
    assert p99_itl(stratified).verdict == "INCONCLUSIVE" and stratified.warnings, "no overlap: no judgement, said"


async def test_too_little_traffic_holds_instead_of_rolling_back(scripted, tmp_path: Path) -> None:
    base = scripted(**NOISY)
    cand = scripted(**(NOISY | {"interval_ms": 40.0}))  # twice as slow: would fail if there were evidence
    rollout = write_rollout(
        tmp_path,
        {"baseline": [base.base_url], "candidate": [cand.base_url]},
        steps=[{"percent": 50, "min_time_s": 0, "min_requests": 0}, {"percent": 100}],
        analysis=analysis(1.0, min_samples=30),
    )
    async with running(CanaryRun(rollout, tmp_path / "logs")) as run:
        tally = await drive(run.url, requests=24, concurrency=1, pace_s=0.05)
        while len(run.events("window")) < 5:
            await asyncio.sleep(0.2)
        outcome = await run.stopped()
    assert tally.ok == 24
    verdicts = [w.details["analysis"]["verdict"] for w in run.events("window")]
    assert set(verdicts) == {"INCONCLUSIVE"}, verdicts
    assert outcome.status == "running" and decisions(run, "rollback") == []
    assert all(e.decision == "hold" for e in run.events("decision"))


async def test_a_restarted_controller_resumes_at_its_weight_and_step(scripted, tmp_path: Path) -> None:
    base = scripted(**NOISY)
    cand = scripted(**NOISY)
    rollout = write_rollout(
        tmp_path,
        {"baseline": [base.base_url], "candidate": [cand.base_url]},
        steps=[{"percent": 30, "min_time_s": 0, "min_requests": 0}, {"percent": 40, "min_time_s": 3600}, {"percent": 100}],
        # The test is of resuming, not of judging: Kayenta's plain rule (no power requirement) lets a 1 s window of
        # a few requests advance the first step.
        analysis=analysis(1.0, min_samples=5, promote_windows=1, min_power=0.0),
    )
    keys = user_keys(300)
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as first:
        stop = asyncio.Event()
        load = asyncio.ensure_future(drive(first.url, requests=100_000, concurrency=8, keys=keys, stop=stop, tag="warm"))
        await wait_until(first, lambda: decisions(first, "advance"), 60)
        stop.set()
        await load
        await drive(first.url, requests=300, concurrency=8, keys=keys, tag="before")
        await first.stopped()
    with first.store() as store:
        before = store.load_state()
    assert before is not None and (before.step, before.percent) == (1, 40.0)
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as second:
        tally = await drive(second.url, requests=300, concurrency=8, keys=keys, tag="after")
        await second.stopped()
    with second.store() as store:
        after = store.load_state()
        started = store.events(kinds=("started",))
        records = store.requests()
    assert after is not None and (after.step, after.percent) == (1, 40.0)
    assert started[-1].details["resumed"] is True
    assert tally.ok == 300
    # Sticky keys: request i carries key i before and after the restart, and lands in the same pool.
    pool_of = {r.request_id: r.pool for r in records if not r.retried}
    moved = [i for i in range(300) if pool_of[f"before-{i}-{keys(i)}"] != pool_of[f"after-{i}-{keys(i)}"]]
    assert moved == []
    share = sum(pool_of[f"after-{i}-{keys(i)}"] == "candidate" for i in range(300)) / 300
    assert 0.25 < share < 0.55, f"about 40 % of the keys go to the candidate, got {share:.0%}"


async def test_admin_calls_without_the_token_are_refused_and_logged_without_it(scripted, tmp_path: Path) -> None:
    base = scripted(**NOISY)
    cand = scripted(**NOISY)
    rollout = write_rollout(tmp_path, {"baseline": [base.base_url], "candidate": [cand.base_url]}, analysis=analysis(5.0))
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as run:
        async with aiohttp.ClientSession() as s:
            for headers in ({}, {"Authorization": "Bearer wrong-token-123"}, {"Authorization": f"Basic {TOKEN}"}):
                async with s.post(f"{run.admin_url}/rollback", headers=headers) as r:
                    assert r.status == 401
            async with s.get(f"{run.admin_url}/status", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                status = await r.json()
            assert status["state"] == "running", "the refused rollback did nothing"
            async with s.post(f"{run.admin_url}/pause", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                assert r.status == 200 and (await r.json())["state"] == "paused"
            async with s.post(f"{run.admin_url}/pause", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                assert r.status == 409
        await run.stopped()
    logged = "\n".join(run.lines)
    assert "refused POST /rollback" in logged
    assert TOKEN not in logged and "wrong-token-123" not in logged
    with run.store() as store:
        kinds = [(e.kind, e.decision) for e in store.events()]
        assert ("decision", "pause") in kinds and ("decision", "rollback") not in kinds
    state_bytes = Path(run.rollout.state.path).read_bytes() + Path(str(run.rollout.state.path) + ".events.jsonl").read_bytes()
    assert TOKEN.encode() not in state_bytes


async def test_hooks_get_metacharacters_literally_and_a_failing_hook_is_reported(scripted, tmp_path: Path) -> None:
    base = scripted(**NOISY)
    cand = scripted(**NOISY)
    out = tmp_path / "argv.json"
    tricky = "; rm -rf ~ && echo $HOME | cat `id` > /tmp/x"
    write = [
        sys.executable,
        "-c",
        "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))",
        str(out),
        tricky,
        "*",
    ]
    fail = [sys.executable, "-c", "import sys; print('unit not found', file=sys.stderr); sys.exit(5)"]
    rollout = write_rollout(
        tmp_path,
        {"baseline": [base.base_url], "candidate": [cand.base_url]},
        analysis=analysis(5.0),
        hooks={"rollback": [write, fail], "timeout_s": 20},
    )
    async with running(CanaryRun(rollout, tmp_path / "logs")) as run:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{run.admin_url}/rollback", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                assert r.status == 200
        outcome = await run.finish(timeout_s=30)
    assert outcome.status == "rolled_back"
    assert json.loads(out.read_text()) == [tricky, "*"], "no shell saw the arguments"
    hooks = run.events("hook")
    assert [h.details["exit_code"] for h in hooks] == [0, 5]
    assert "unit not found" in hooks[1].details["stderr"]
    assert any("FAILED" in line for line in run.lines), "a failing hook is reported loudly"


async def test_a_pool_that_does_not_answer_is_refused_before_the_first_weight(scripted, tmp_path: Path) -> None:
    """Issue 28: with a pool unreachable ``canary run`` started and served errors; now it stops at start (exit 4 via
    ServerError) naming the pool, and the state file records no start."""
    base = scripted(**NOISY)
    nobody = f"http://127.0.0.1:{free_port()}"
    rollout = write_rollout(tmp_path, {"baseline": [base.base_url], "candidate": [nobody]})
    run = CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)
    run.start()
    assert run.task is not None
    with pytest.raises(
        ServerError, match=rf"the candidate pool does not answer on any of its servers: {nobody} \(/v1/models: .*refused"
    ):
        await asyncio.wait_for(run.task, 30)
    assert not Path(run.rollout.state.path).exists() or run.events("started") == []


async def test_streams_still_in_flight_at_the_drain_deadline_are_cut_there_and_counted(scripted, tmp_path: Path) -> None:
    """Issue 28: SIGTERM with a 1 s drain and 5 s streams: the streams are cut at the deadline (not at twice it),
    recorded as cut at shutdown (an error of neither pool), and the ``stopped`` event counts them."""
    slow = {"ttft_ms": 20.0, "interval_ms": 50.0, "chunks": 100}
    rollout = write_rollout(tmp_path, {"baseline": [scripted(**slow).base_url], "candidate": [scripted(**slow).base_url]})
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False, drain_s=1.0)) as run:
        load = asyncio.ensure_future(drive(run.url, requests=6, concurrency=6, max_tokens=100))
        await asyncio.sleep(1.0)
        stopping = time.monotonic()
        await run.stopped()
        stop_took = time.monotonic() - stopping
        tally = await load
    [stopped] = run.events("stopped")
    with run.store() as store:
        cut = [r for r in store.requests() if r.error == CUT_AT_SHUTDOWN]
    assert tally.failed == 6 and len(cut) == 6 and all(r.client_disconnected for r in cut)
    assert stopped.details["cut_at_shutdown"] == 6 and "6 stream(s) cut at shutdown" in stopped.reasons[0]
    # The streams had 4 s left: the stop ended at the 1 s deadline, well before they would have finished.
    assert stop_took < 3.0, stop_took
