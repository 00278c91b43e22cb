"""Grafana annotations from a real canary run: the real controller, proxy, admin API and SQLite state on the
test's loop, in front of scripted servers, posting to a FAKE Grafana (``tests/grafana_fake.py``) that records
what it received and answers 200, 500, nothing at all, or is not there.

What is asserted: one annotation per decision that moves the rollout, in the order committed, at the time
committed, with Grafana's documented body and a Bearer token; the token in no file of the run and in no log
line; and a Grafana that fails or hangs neither prevents nor holds back a rollback, whose event log then
records the post that failed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specguard.canary.notify.grafana import DASHBOARD_INVENTORY, annotation_kind
from specguard.canary.observability.dashboard import dashboard_uid
from specguard.canary.state.records import CanaryEvent
from specguard.vllm.process import free_port
from tests.canary_harness import TOKEN, TOKEN_ENV, CanaryRun, drive, running, user_keys, write_rollout
from tests.grafana_fake import FakeGrafana

GRAFANA_TOKEN = "glsa_fake-grafana-token-5d1c9e"  # noqa: S105  the test's own token, set in the environment here
GRAFANA_ENV = "SPECGUARD_TEST_GRAFANA_TOKEN"
NOISY = {"ttft_ms": 40.0, "interval_ms": 20.0, "chunks": 8, "jitter": 0.12}
LATENCY_ONLY = [
    {"metric": "itl_ms", "percentile": "p99", "budget": 0.10},
    {"metric": "e2e_ms", "percentile": "p99", "budget": 0.10},
    {"metric": "error_rate", "budget": 0.005},
]


@pytest.fixture(autouse=True)
def _tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(GRAFANA_ENV, GRAFANA_TOKEN)


def grafana_key(url: str, **extra: Any) -> dict[str, Any]:
    return {"url": url, "token_env": GRAFANA_ENV} | extra


def annotated(run: CanaryRun) -> list[CanaryEvent]:
    return [e for e in run.events() if annotation_kind(e) is not None]


def token_in_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and GRAFANA_TOKEN.encode() in p.read_bytes()]


async def admin_rollback(run: CanaryRun) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{run.admin_url}/rollback", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            assert r.status == 200, await r.text()
            doc: dict[str, Any] = await r.json()
            return doc


async def test_each_decision_is_one_annotation_in_order_at_its_committed_time(scripted, tmp_path: Path) -> None:
    fake = await FakeGrafana().start()
    try:
        base, cand = scripted(**NOISY, seed=1), scripted(**NOISY, seed=2)
        rollout = write_rollout(
            tmp_path,
            {"baseline": [base.base_url], "candidate": [cand.base_url]},
            steps=[{"percent": 50, "min_time_s": 0, "min_requests": 0}, {"percent": 100, "min_time_s": 0, "min_requests": 0}],
            # Of annotations, not of judging: Kayenta's plain rule (min_power 0) lets 1 s windows of a few requests pass.
            analysis={"window_s": 1.0, "metrics": LATENCY_ONLY, "min_samples": 5, "promote_windows": 1, "min_power": 0.0},
            grafana=grafana_key(fake.url, tags=["ci"]),
        )
        async with running(CanaryRun(rollout, tmp_path / "logs")) as run:
            stop = asyncio.Event()
            load = asyncio.ensure_future(drive(run.url, requests=100_000, concurrency=6, keys=user_keys(200), stop=stop))
            outcome = await run.finish(timeout_s=90)
            stop.set()
            await load
    finally:
        await fake.stop()
    assert outcome.status == "promoted", run.lines[-5:]
    decisions = annotated(run)
    kinds = [annotation_kind(e) for e in decisions]
    assert kinds == ["start", "advance", "promote"]
    assert [r.body["tags"][3] for r in fake.received] == kinds, "one annotation per decision, in the order committed"
    assert [r.body["time"] for r in fake.received] == [round(e.time * 1000) for e in decisions], "the committed times"
    for r in fake.received:
        assert (r.method, r.path) == ("POST", "/api/annotations")
        assert r.headers["Authorization"] == f"Bearer {GRAFANA_TOKEN}"
        assert r.body["dashboardUID"] == dashboard_uid("test-canary")
        assert r.body["tags"][:3] == ["specguard", "canary", "test-canary"] and r.body["tags"][4:] == ["ci"]
        assert r.body["text"].startswith("specguard canary test-canary: ")
        assert "baseline: vLLM scripted" in r.body["text"] and "candidate: vLLM scripted" in r.body["text"]
        assert f"dashboard {dashboard_uid('test-canary')}" in r.body["text"]
    assert "advance at 50 % -> 100 % (step 2)" in fake.received[1].body["text"]
    assert run.events("annotation") == [], "every post was taken"
    with run.store() as store:
        assert store.inventories()[DASHBOARD_INVENTORY]["uid"] == dashboard_uid("test-canary")
    assert token_in_files(tmp_path) == []
    assert not any(GRAFANA_TOKEN in line for line in run.lines)


async def test_a_grafana_answering_500_does_not_prevent_a_critical_rollback(scripted, tmp_path: Path) -> None:
    fake = await FakeGrafana(status=500).start()
    try:
        base, cand = scripted(**NOISY), scripted(**NOISY, fault="http_500")
        rollout = write_rollout(
            tmp_path,
            {"baseline": [base.base_url], "candidate": [cand.base_url]},
            steps=[{"percent": 50}, {"percent": 100}],
            analysis={"window_s": 30.0, "metrics": LATENCY_ONLY, "critical": {"http_5xx_burst": {"count": 5, "within_s": 10}}},
            grafana=grafana_key(fake.url),
        )
        async with running(CanaryRun(rollout, tmp_path / "logs")) as run:
            stop = asyncio.Event()
            load = asyncio.ensure_future(drive(run.url, requests=400, concurrency=8, keys=user_keys(100), stop=stop))
            outcome = await run.finish(timeout_s=60)
            stop.set()
            await load
    finally:
        await fake.stop()
    assert outcome.status == "rolled_back"
    with run.store() as store:
        state = store.load_state()
    assert state is not None and state.percent == 0.0
    decisions = annotated(run)
    assert [annotation_kind(e) for e in decisions] == ["start", "rollback"]
    assert [r.body["tags"][3] for r in fake.received] == ["start", "rollback"], "one try each, no retries"
    failed = run.events("annotation")
    assert [e.details["for_seq"] for e in failed] == [e.seq for e in decisions]
    assert all(e.details["status"] == 500 and "HTTP 500" in e.reasons[0] for e in failed)
    assert sum("Grafana annotation for the rollback decision not posted" in line for line in run.lines) == 1
    assert token_in_files(tmp_path) == [] and not any(GRAFANA_TOKEN in line for line in run.lines)


async def test_a_hanging_grafana_does_not_hold_a_rollback_back(scripted, tmp_path: Path) -> None:
    fake = await FakeGrafana(hang=True).start()
    marker = tmp_path / "rolled-back"
    try:
        base, cand = scripted(**NOISY), scripted(**NOISY)
        rollout = write_rollout(
            tmp_path,
            {"baseline": [base.base_url], "candidate": [cand.base_url]},
            analysis={"window_s": 30.0, "metrics": LATENCY_ONLY},
            hooks={"rollback": [["touch", str(marker)]]},
            grafana=grafana_key(fake.url, timeout_s=60),
        )
        async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as run:
            await asyncio.wait_for(fake.arrived.wait(), 30)  # the start annotation is in Grafana's hands...
            status = await admin_rollback(run)
            # ...and still unanswered when the rollback is done: committed, weight 0, hooks run.
            assert len(fake.received) == 1 and not fake.release.is_set()
            assert (status["state"], status["weight"]) == ("rolled_back", 0.0)
            assert marker.exists(), "the rollback hook ran while Grafana held the first annotation"
            assert [e.decision for e in run.events("decision")] == ["rollback"]
            fake.release.set()
            await run.stopped()
    finally:
        await fake.stop()
    assert [r.body["tags"][3] for r in fake.received] == ["start", "rollback"], "posted in order once Grafana answered"
    assert fake.received[1].body["time"] == round(run.events("decision")[0].time * 1000)
    assert "rollback at " in fake.received[1].body["text"] and "-> 0 %" in fake.received[1].body["text"]
    assert run.events("annotation") == []


@pytest.mark.parametrize("grafana", ["unreachable", "timing out"])
async def test_an_unreachable_or_silent_grafana_is_logged_and_the_rollback_happens(
    scripted, tmp_path: Path, grafana: str
) -> None:
    fake = FakeGrafana(hang=True)
    if grafana == "timing out":
        await fake.start()
        url = fake.url
    else:
        url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    try:
        base, cand = scripted(**NOISY), scripted(**NOISY)
        rollout = write_rollout(
            tmp_path,
            {"baseline": [base.base_url], "candidate": [cand.base_url]},
            analysis={"window_s": 30.0, "metrics": LATENCY_ONLY},
            grafana=grafana_key(url, timeout_s=0.5),
        )
        async with running(CanaryRun(rollout, tmp_path / "logs")) as run:
            status = await admin_rollback(run)
            outcome = await run.finish(timeout_s=30)
    finally:
        await fake.stop()
    assert (status["state"], status["weight"], outcome.status) == ("rolled_back", 0.0, "rolled_back")
    with run.store() as store:
        state = store.load_state()
    assert state is not None and state.percent == 0.0
    failed = run.events("annotation")
    assert [e.details["kind"] for e in failed] == ["start", "rollback"]
    expected = "no answer from" if grafana == "timing out" else "posting to"
    assert all(expected in e.details["error"] and e.details["status"] is None for e in failed), failed
    assert sum("not posted" in line for line in run.lines) == 2
    assert token_in_files(tmp_path) == [] and not any(GRAFANA_TOKEN in line for line in run.lines)
