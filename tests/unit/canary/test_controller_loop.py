"""The control loop alone: ``CanaryController`` with a fake clock, a fake router, a fake evidence source and a
fake hook runner, and the real SQLite store in a temporary directory (as Flagger's scheduler fixture tests drive
its controller against fake routers and metric providers). No socket, no process: each window's verdict is
scripted, so each test says what the loop does with it: advance, hold, roll back, promote, pause and resume,
a failing hook, a critical event, a restart from the store.

A window is closed through ``_close_window`` (what ``run`` calls every ``window_s``), so that no test waits
for a window's wall-clock time; manual control and critical events go through ``run`` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from specguard.canary.control.controller import CanaryController
from specguard.canary.control.hooks import HookResult
from specguard.canary.control.series import ControllerSeries
from specguard.canary.evidence.base import EvidenceSource, WindowEvidence
from specguard.canary.judge.decision import CriticalEvent
from specguard.canary.judge.window import MetricResult, WindowAnalysis, WindowVerdict
from specguard.canary.routers.base import TrafficRouter
from specguard.canary.spec.rollout import Rollout
from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state.records import CanaryEvent, EventKind, ProxiedRequest
from specguard.canary.state.store import CanaryStore, StoreMeta
from specguard.errors import RuntimeFailure

T0 = 1_700_000_000.0

ROLLOUT = Rollout.model_validate(
    {
        "name": "loop",
        "pools": {"baseline": {"servers": ["http://a:1"]}, "candidate": {"servers": ["http://b:1"]}},
        "admin": {"token_env": "T"},
        "steps": [
            {"percent": 10, "min_time_s": 0, "min_requests": 0},
            {"percent": 50, "min_time_s": 0, "min_requests": 0},
            {"percent": 100, "min_time_s": 0, "min_requests": 0},
        ],
        "analysis": {"promote_windows": 1, "rollback_windows": 2},
        "hooks": {"rollback": [["undo", "--now"]], "promote": [["finish"]]},
    }
)


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class FakeRouter:
    """A proxy-like router: weights apply at once; every call is written down."""

    immediate = True
    drain_poll_s = 0.0

    def __init__(self) -> None:
        self.weights: list[tuple[float, float, int]] = []
        self.decisions: list[str] = []
        self.reported: str | None = None  # what the engine reports differently, until weights are set again
        self.sticky = False  # the engine keeps reporting it even after the weights are set again
        self.unreachable = False

    def set_weights_now(self, candidate: float, control: float, step: int) -> None:
        self.weights.append((candidate, control, step))

    async def set_weights(self, candidate: float, control: float, step: int) -> None:
        if self.unreachable:
            raise RuntimeFailure("the fake engine's socket: connection refused")
        self.weights.append((candidate, control, step))
        if not self.sticky:
            self.reported = None

    def weights_note(self) -> str | None:
        return None

    async def differs(self, candidate: float, control: float) -> str | None:
        if self.unreachable:
            raise RuntimeFailure("the fake engine's socket: connection refused")
        return self.reported

    async def in_flight(self) -> dict[PoolName, int] | None:
        return {"baseline": 0, "candidate": 0}

    def count_decision(self, kind: str) -> None:
        self.decisions.append(kind)

    def describe(self) -> str:
        return "a fake router"

    async def close(self) -> None:
        pass


def analysis(look: int, verdict: WindowVerdict) -> WindowAnalysis:
    """A window's analysis with one ITL result of ``verdict``; a judged one (PASS or FAIL) spent its look."""
    judged = verdict != "INCONCLUSIVE"
    result = MetricResult(
        segment="all",
        metric="itl_ms",
        verdict=verdict,
        comparison="naive",
        p_value=0.5 if verdict == "PASS" else (0.001 if judged else None),
        threshold=0.01,
        budget=1.1,
        n_baseline=100 if judged else 0,
        n_candidate=100 if judged else 0,
        text=f"itl_ms {verdict}",
    )
    return WindowAnalysis(
        look=look, verdict=verdict, comparison="naive", alpha_look=0.01, results=[result], warnings=[], error_control="test"
    )


class FakeEvidence:
    """Scripted windows: each ``judge`` takes the next verdict; each ``read`` the next list of critical events."""

    def __init__(self, verdicts: Sequence[WindowVerdict] = (), critical: Sequence[Sequence[CriticalEvent]] = ()) -> None:
        self.verdicts = list(verdicts)
        self.critical = [list(c) for c in critical]
        self.begun: list[float] = []
        self.judged: list[tuple[int, int, float]] = []  # (look, records, percent)

    async def begin(self, at: float) -> None:
        self.begun.append(at)

    async def read(self) -> list[CriticalEvent]:
        return self.critical.pop(0) if self.critical else []

    async def judge(
        self, records: Sequence[ProxiedRequest], start: float, end: float, look: int, *, has_control: bool, percent: float
    ) -> WindowEvidence:
        self.judged.append((look, len(records), percent))
        return WindowEvidence(analysis=analysis(look, self.verdicts.pop(0)), gauges={}, acceptance={}, candidate_requests=7)

    async def close(self) -> None:
        pass


class FakeHooks:
    """Runs nothing: answers each command with ``exit_code``."""

    def __init__(self, exit_code: int = 0) -> None:
        self.exit_code = exit_code
        self.ran: list[list[str]] = []

    async def __call__(
        self, commands: Sequence[Sequence[str]], *, timeout_s: float, retries: int, env: Mapping[str, str] | None = None
    ) -> list[HookResult]:
        out = []
        for argv in commands:
            self.ran.append(list(argv))
            out.append(HookResult(list(argv), 1, self.exit_code, False, 0.01, "", "it broke" if self.exit_code else ""))
            if self.exit_code:
                break
        return out


def open_store(tmp_path: Path) -> CanaryStore:
    meta = StoreMeta(rollout_name=ROLLOUT.name, rollout=ROLLOUT.stored(), created_unix=T0)
    return CanaryStore.create_or_open(tmp_path / "state.db", meta)


class Loop:
    """One controller over the fakes, and what it logged."""

    def __init__(self, tmp_path: Path, evidence: FakeEvidence, hooks: FakeHooks | None = None) -> None:
        self.clock = FakeClock()
        self.router = FakeRouter()
        self.evidence = evidence
        self.hooks = hooks or FakeHooks()
        self.store = open_store(tmp_path)
        # What canary run exports on the admin API's /metrics behind an engine: fed by the store's events.
        self.registry = CollectorRegistry()
        self.store.on_event = ControllerSeries(self.registry, weights=True).observe
        self.lines: list[str] = []
        router: TrafficRouter = self.router
        source: EvidenceSource = self.evidence
        self.controller = CanaryController(
            ROLLOUT, self.store, router, source, log=self.lines.append, clock=self.clock, drain_s=1.0, hook_runner=self.hooks
        )

    async def window(self) -> None:
        start = self.clock.now
        self.clock.now += ROLLOUT.analysis.window_s
        await self.controller._close_window(start, self.clock.now)

    def decisions(self) -> list[str | None]:
        return [e.decision for e in self.store.events(kinds=["decision"])]

    def events(self, kind: EventKind) -> list[CanaryEvent]:
        return self.store.events(kinds=[kind])


def test_a_passing_window_advances_to_the_next_step(tmp_path: Path) -> None:
    async def go() -> Loop:
        loop = Loop(tmp_path, FakeEvidence(["PASS"]))
        await loop.window()
        return loop

    loop = asyncio.run(go())
    st = loop.controller.state
    assert (st.status, st.step, st.percent, st.look) == ("running", 1, 50.0, 1)
    assert loop.router.weights == [(0.1, 0.0, 0), (0.5, 0.0, 1)], "step 1's weight at start, then step 2's"
    assert loop.decisions() == ["advance"] and loop.router.decisions == ["advance"]
    assert loop.evidence.judged == [(1, 0, 10.0)]
    assert loop.store.load_state() == st, "the move is committed before it is acted on"


def test_an_inconclusive_window_holds_and_spends_no_look(tmp_path: Path) -> None:
    async def go() -> Loop:
        loop = Loop(tmp_path, FakeEvidence(["INCONCLUSIVE", "PASS"]))
        await loop.window()
        await loop.window()
        return loop

    loop = asyncio.run(go())
    assert loop.decisions() == ["hold", "advance"]
    assert [look for look, _, _ in loop.evidence.judged] == [1, 1], "the window that ran no test left its look"
    assert loop.router.weights == [(0.1, 0.0, 0), (0.5, 0.0, 1)], "a hold moves no weight"
    hold = loop.store.events(kinds=["decision"])[0]
    assert any("could not be judged" in r for r in hold.reasons)


def test_two_failing_windows_roll_back_drain_and_run_the_rollback_hook(tmp_path: Path) -> None:
    async def go() -> Loop:
        loop = Loop(tmp_path, FakeEvidence(["FAIL", "FAIL"]))
        await loop.window()
        assert loop.controller.state.status == "running", "one failing window holds (rollback_windows: 2)"
        await loop.window()
        return loop

    loop = asyncio.run(go())
    st = loop.controller.state
    assert (st.status, st.percent) == ("rolled_back", 0.0)
    assert loop.decisions() == ["hold", "rollback"]
    assert loop.router.weights[-1] == (0.0, 0.0, 0)
    assert loop.hooks.ran == [["undo", "--now"]]
    assert [e.details["phase"] for e in loop.events("hook")] == ["rollback"]
    assert loop.controller.finished.is_set()
    # The exported series say what the event log says (the rollback alert keys on the decisions counter).
    sample = loop.registry.get_sample_value
    assert sample("specguard_canary_decisions_total", {"kind": "rollback"}) == 1.0
    assert sample("specguard_canary_decisions_total", {"kind": "hold"}) == 1.0
    assert sample("specguard_canary_candidate_weight") == 0.0 and sample("specguard_canary_step") == 0.0
    assert sample("specguard_canary_control_weight") == 0.0
    for kind in ("started", "window", "decision", "hook"):
        assert sample("specguard_canary_events_total", {"kind": kind}) == len(loop.events(kind)), kind


def test_passing_windows_walk_the_steps_and_promote_with_the_promote_hook(tmp_path: Path) -> None:
    async def go() -> Loop:
        loop = Loop(tmp_path, FakeEvidence(["PASS", "PASS", "INCONCLUSIVE"]))
        for _ in range(3):
            await loop.window()
        return loop

    loop = asyncio.run(go())
    st = loop.controller.state
    assert (st.status, st.percent) == ("promoted", 100.0)
    assert loop.decisions() == ["advance", "advance", "promote"], "at 100 % the window is a bake, not a comparison"
    # The promotion sets the whole share once more: a control pool, were there one, would get none from then on.
    assert loop.router.weights == [(0.1, 0.0, 0), (0.5, 0.0, 1), (1.0, 0.0, 2), (1.0, 0.0, 2)]
    assert loop.hooks.ran == [["finish"]] and loop.controller.finished.is_set()


def test_a_failing_hook_is_logged_and_the_rollback_stands(tmp_path: Path) -> None:
    async def go() -> Loop:
        loop = Loop(tmp_path, FakeEvidence(["FAIL", "FAIL"]), FakeHooks(exit_code=1))
        await loop.window()
        await loop.window()
        return loop

    loop = asyncio.run(go())
    assert loop.controller.state.status == "rolled_back"
    (hook,) = loop.events("hook")
    assert hook.details["exit_code"] == 1 and "FAILED" in hook.reasons[0]
    assert any(line.startswith("!!! rollback hook FAILED") and "it broke" in line for line in loop.lines)


def test_pause_holds_a_passing_window_and_resume_lets_the_next_one_advance(tmp_path: Path) -> None:
    async def go() -> Loop:
        loop = Loop(tmp_path, FakeEvidence(["PASS", "PASS"]))
        stop = asyncio.Event()
        task = asyncio.create_task(loop.controller.run(stop))
        paused = await loop.controller.request("pause")
        assert paused["state"] == "paused"
        await loop.window()
        assert loop.controller.state.step == 0, "paused: no automatic advance"
        resumed = await loop.controller.request("resume")
        assert resumed["state"] == "running"
        await loop.window()
        stop.set()
        assert await task == "running"
        return loop

    loop = asyncio.run(go())
    assert loop.decisions() == ["pause", "hold", "resume", "advance"]
    hold = loop.store.events(kinds=["decision"])[1]
    assert hold.reasons[0].startswith("paused")
    assert loop.evidence.begun == [T0], "the loop marked its first window's start"


def test_a_critical_event_from_the_evidence_rolls_back_at_once(tmp_path: Path) -> None:
    crash = CriticalEvent(kind="crash", server="http://b:1", detail="/metrics no longer answers")

    async def go() -> Loop:
        loop = Loop(tmp_path, FakeEvidence(critical=[[crash]]))
        stop = asyncio.Event()
        task = asyncio.create_task(loop.controller.run(stop))
        await asyncio.wait_for(loop.controller.finished.wait(), timeout=30)  # set once the rollback's hooks ran
        stop.set()
        assert await task == "rolled_back"
        return loop

    loop = asyncio.run(go())
    assert loop.decisions() == ["rollback"] and loop.evidence.judged == [], "no window was needed"
    assert [e.details["kind"] for e in loop.events("critical")] == ["crash"]
    assert loop.router.weights[-1] == (0.0, 0.0, 0) and loop.hooks.ran == [["undo", "--now"]]


def test_a_restarted_controller_resumes_from_the_store_at_the_same_step_and_weight(tmp_path: Path) -> None:
    async def first() -> None:
        loop = Loop(tmp_path, FakeEvidence(["PASS"]))
        await loop.window()
        loop.store.close()

    async def second() -> Loop:
        return Loop(tmp_path, FakeEvidence())

    asyncio.run(first())
    loop = asyncio.run(second())
    st = loop.controller.state
    assert (st.status, st.step, st.percent, st.look) == ("running", 1, 50.0, 1)
    assert loop.router.weights == [(0.5, 0.0, 1)], "the restarted controller serves the stored weight at once"
    started = loop.events("started")
    assert [e.details["resumed"] for e in started] == [False, True]


async def test_drift_is_applied_again_once_and_said(tmp_path: Path) -> None:
    loop = Loop(tmp_path, FakeEvidence())
    loop.router.reported = "speculative-1 weight 0 (set 64)"  # a restarted engine came back with its own weights
    before = len(loop.router.weights)
    await loop.controller._reconcile()
    [drift] = loop.store.events(kinds=["drift"])
    assert (
        "speculative-1 weight 0 (set 64)" in drift.reasons[0] and drift.details["reported"] == "speculative-1 weight 0 (set 64)"
    )
    assert len(loop.router.weights) == before + 1 and loop.controller.state.status == "running"


async def test_drift_that_persists_pauses_with_a_critical_event_naming_what_the_engine_reports(tmp_path: Path) -> None:
    loop = Loop(tmp_path, FakeEvidence())
    loop.router.reported, loop.router.sticky = "speculative-1 weight 0 (set 64)", True
    await loop.controller._reconcile()
    [critical] = loop.store.events(kinds=["critical"])
    assert "still reports speculative-1 weight 0 (set 64)" in critical.reasons[0]
    assert loop.controller.state.status == "paused" and loop.store.load_state().status == "paused"


async def test_an_unreachable_engine_pauses_and_once_back_the_candidate_is_at_0_until_resumed(tmp_path: Path) -> None:
    loop = Loop(tmp_path, FakeEvidence())
    loop.router.unreachable = True
    await loop.controller._reconcile()
    await loop.controller._reconcile()  # said once, not every window
    [lost] = loop.store.events(kinds=["engine"])
    assert "cannot be reached" in lost.reasons[0] and loop.store.load_state().status == "paused"
    loop.router.unreachable = False
    await loop.controller._reconcile()
    back = loop.store.events(kinds=["engine"])[-1]
    assert "answers again" in back.reasons[0] and loop.router.weights[-1][:2] == (0.0, 0.0)
    assert loop.controller.state.status == "paused"


class FakeGatewayRouter(FakeRouter):
    """An engine that counts no streams and, like ``apply: false``, only writes its route."""

    immediate = False

    async def in_flight(self) -> dict[PoolName, int] | None:
        return None

    def weights_note(self) -> str | None:
        return "route written, not applied (engine.apply: false): kubectl apply -f route.yaml"


async def test_a_rollback_on_an_engine_that_counts_no_streams_waits_drain_s_and_says_the_route_is_not_applied(
    tmp_path: Path,
) -> None:
    loop = Loop(tmp_path, FakeEvidence(["FAIL", "FAIL"]))
    loop.controller.traffic = loop.router = FakeGatewayRouter()
    await loop.window()
    await loop.window()
    rollback = loop.store.events(kinds=["decision"])[-1]
    assert rollback.decision == "rollback" and rollback.reasons[-1].startswith("route written, not applied")
    [hook] = loop.events("hook")
    assert hook.details["drain"] == "waited drain_s (1 s): the engine does not count streams"


async def test_a_deleted_state_file_stops_the_decisions_and_is_said_once_loudly(tmp_path: Path) -> None:
    """Issue 29: a state file deleted under a running controller went unnoticed, and the stop said it was saved."""
    loop = Loop(tmp_path, FakeEvidence(["PASS", "PASS"]))
    loop.store.path.unlink()
    await loop.window()
    await loop.window()
    assert loop.evidence.judged == [] and loop.controller.state.step == 0, "no window judged, no step taken"
    assert loop.controller.state_lost is not None and "was deleted or replaced" in loop.controller.state_lost
    assert len([line for line in loop.lines if "was deleted or replaced" in line]) == 1
    loop.controller.on_stopped(0)
    assert not loop.store.path.exists(), "nothing writes to a file that is gone"


def test_the_exported_evidence_is_each_pools_value_the_window_was_judged_on() -> None:
    registry = CollectorRegistry()
    series = ControllerSeries(registry, weights=False)
    result = {"segment": "chat", "metric": "ttft_ms", "baseline_value": 41.5, "candidate_value": 52.0}
    analysis = {"results": [{**result, "n_baseline": 180, "n_candidate": 20}]}
    event = CanaryEvent.model_validate(
        {"seq": 3, "time": T0, "kind": "window", "step": 0, "percent": 10.0, "details": {"analysis": analysis}}
    )
    series.observe(event)
    sample = registry.get_sample_value
    for pool, value, n in (("baseline", 41.5, 180.0), ("candidate", 52.0, 20.0)):
        labels = {"pool": pool, "metric": "ttft_ms", "segment": "chat"}
        assert (sample("specguard_canary_window_value", labels), sample("specguard_canary_window_samples", labels)) == (value, n)
    assert sample("specguard_canary_events_total", {"kind": "window"}) == 1.0
    assert sample("specguard_canary_candidate_weight") is None, "with the proxy, the proxy's series hold the weight"
    # Behind an engine with a control pool: it gets the candidate's share until the candidate has all of it.
    engine = CollectorRegistry()
    weights = ControllerSeries(engine, weights=True, has_control=True)
    shares = []
    for percent in (25.0, 100.0):
        weights.observe(CanaryEvent.model_validate({"seq": 4, "time": T0, "kind": "decision", "step": 1, "percent": percent}))
        shares.append(
            (
                engine.get_sample_value("specguard_canary_candidate_weight"),
                engine.get_sample_value("specguard_canary_control_weight"),
            )
        )
    assert shares == [(0.25, 0.25), (1.0, 0.0)]
