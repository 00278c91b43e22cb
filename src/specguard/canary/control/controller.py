"""The canary controller: windows, analysis, decisions, and what each decision does to the traffic.

One asyncio task owns the rollout. Every ``window_s`` it takes the window's records from the proxy and the
pools' ``/metrics`` reads, analyses candidate against baseline (``canary.judge.window`` through
``canary.judge.policy``), asks ``canary.judge.decision.decide`` for the move, and commits the move and the state it
leads to in one SQLite transaction before acting on it: after a crash the state file never says a weight
the proxy was not about to serve.

What the moves do:

* advance: the candidate's weight rises to the next step for new requests; streams in flight stay where
  they are.
* rollback: the weight drops to 0 for new requests at once (set before anything is written or logged),
  the candidate's streams in flight finish (up to ``drain_s``), then the rollback hooks run and their output
  and exit codes go into the event log. The proxy keeps serving everything from the baseline pool.
* promote (at 100 %): the promotion hooks run likewise.

Critical conditions (a candidate server crashed or restarted, a burst of 5xx answers or broken streams)
roll back at once, between windows. Manual control (pause, resume, promote, rollback) comes through the
admin API. Paused means no automatic advance or promotion; failing windows and critical conditions still
roll back, because a pause is asked for while something is being looked at, not to let it get worse.

Every decision that moves the rollout (start, advance, promote, rollback, pause, resume; and each hold) is
committed in one place, ``_decided``; with ``grafana:`` in the rollout, that is also where its Grafana
annotation is queued (``notify/grafana.py``), after the commit and never awaited: a Grafana that
is slow or down cannot hold a rollback back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specguard.canary.control.hook_env import hook_environment, redact, token_values
from specguard.canary.control.hooks import HookResult, HookRunner, run_hooks
from specguard.canary.control.status import read_status
from specguard.canary.evidence.base import EvidenceSource
from specguard.canary.evidence.pool_watch import BurstDetector
from specguard.canary.judge.decision import CanaryReason, CriticalEvent, Decision, StepProgress, WindowRecord, decide
from specguard.canary.judge.policy import rollout_rule
from specguard.canary.judge.window import spends_look, why_inconclusive
from specguard.canary.notify.grafana import FailedPost, GrafanaAnnotations
from specguard.canary.routers.base import TrafficRouter
from specguard.canary.spec.rollout import Rollout
from specguard.canary.state.records import CanaryEvent, CanaryStatus, ControllerState, EventKind, ProxiedRequest
from specguard.canary.state.store import CanaryStore
from specguard.errors import RuntimeFailure

__all__ = ["CanaryController"]

# How often the pools' /metrics are read within a window: four reads give a gauge mean and counter deltas
# without adding load a server would notice (a vLLM /metrics page is ~100 KB).
_READS_PER_WINDOW = 4
_MAX_READ_INTERVAL_S = 15.0
# Requests are written to the state file at least this often, so that a crash loses at most this much.
_FLUSH_S = 1.0


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a file, None when it is gone."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _move_text(d: Decision) -> str:
    return f"{d.kind} at {d.percent:g} %"


class CanaryController:
    def __init__(
        self,
        rollout: Rollout,
        store: CanaryStore,
        traffic: TrafficRouter,
        evidence: EvidenceSource,
        *,
        log: Callable[[str], None] = print,
        clock: Callable[[], float] = time.time,
        drain_s: float = 300.0,
        annotations: GrafanaAnnotations | None = None,
        hook_runner: HookRunner = run_hooks,
    ) -> None:
        self.rollout = rollout
        self.store = store
        self.traffic = traffic
        # The proxy's records, or behind HAProxy or a Gateway (where no record comes in) the pools' own series.
        self.evidence = evidence
        self._weights_pending = False
        self._engine_lost: str | None = None  # why the engine could not be reached, until it answers again
        self._drain_note: str | None = None  # which wait a rollback's drain used, for its hooks' events
        # The state file's identity, checked each window: a file deleted or replaced under a running controller
        # went unnoticed before (issue 29), and the stop then claimed a state "saved" in a file that was gone.
        self._state_identity = _file_identity(store.path)
        self.state_lost: str | None = None
        self.log = log
        self.clock = clock
        self.drain_s = drain_s
        self.hook_runner = hook_runner
        self.rule = rollout_rule(rollout)
        self.has_control = rollout.pools.control is not None
        self._window: list[ProxiedRequest] = []
        self._unsaved: list[ProxiedRequest] = []
        self._critical: list[CriticalEvent] = []
        self._wake = asyncio.Event()
        crit = rollout.analysis.critical
        self._bursts = {
            "http_5xx_burst": BurstDetector(crit.http_5xx_burst.count, crit.http_5xx_burst.within_s)
            if crit.http_5xx_burst
            else None,
            "stream_error_burst": BurstDetector(crit.stream_error_burst.count, crit.stream_error_burst.within_s)
            if crit.stream_error_burst
            else None,
        }
        self._manual: asyncio.Queue[tuple[str, asyncio.Future[dict[str, Any]]]] = asyncio.Queue()
        self.finished = asyncio.Event()  # set when promoted or rolled back and the hooks have run
        self.annotations = annotations
        if annotations is not None:
            annotations.on_failure = self._annotation_failed
        self.state = self._resume_or_start()

    # ---- state --------------------------------------------------------------------------------------------

    def _resume_or_start(self) -> ControllerState:
        now = self.clock()
        state = self.store.load_state()
        resumed = state is not None
        if state is None:
            state = ControllerState(step=0, percent=self.rule.steps[0].percent, step_started_unix=now, updated_unix=now)
        else:
            state = state.model_copy(update={"updated_unix": now})
        self._started = (resumed, now)
        if self.traffic.immediate:
            self.traffic.set_weights_now(*self._shares(state), state.step)
            self._record_start(state)
        else:
            # An engine confirms the first weights only when ``run`` awaits them: nothing is written to the state
            # before that (issue 28: a wrong socket path left a state file saying "started at 25 %").
            self._weights_pending = True
        if state.status in ("promoted", "rolled_back"):
            self.finished.set()
        return state

    def _record_start(self, state: ControllerState) -> None:
        resumed, now = self._started
        self._decided(
            state,
            "started",
            time=now,
            decision=None,
            reasons=[f"{'resumed' if resumed else 'started'} at {state.percent:g} % (step {state.step + 1}), {state.status}"],
            details={"resumed": resumed, "status": state.status},
            from_percent=state.percent,
        )

    def _decided(
        self,
        state: ControllerState,
        kind: EventKind,
        *,
        time: float,
        decision: str | None,
        reasons: Sequence[str],
        details: dict[str, Any],
        from_percent: float,
    ) -> CanaryEvent:
        """The one place a decision is committed (the state and its event, one transaction), then announced:
        its Grafana annotation is queued for the background poster, which this never waits for."""
        event = self.store.commit_decision(
            state, kind, time=time, decision=decision, step=state.step, percent=state.percent, reasons=reasons, details=details
        )
        if self.annotations is not None:
            self.annotations.submit(event, from_percent)
        return event

    def _annotation_failed(self, failed: FailedPost) -> None:
        """A decision's annotation Grafana did not take: an event in the log and a warning, nothing more."""
        self.store.append_event(
            "annotation",
            time=self.clock(),
            step=self.state.step,
            percent=self.state.percent,
            reasons=[f"Grafana annotation for the {failed.kind} decision (event {failed.event.seq}) not posted: {failed.why}"],
            details={"for_seq": failed.event.seq, "kind": failed.kind, "status": failed.status, "error": failed.why},
        )
        self.log(f"warning: Grafana annotation for the {failed.kind} decision not posted: {failed.why}")

    def _shares(self, state: ControllerState) -> tuple[float, float]:
        """The weights for a state: the candidate's share, and the control pool's equal share while it runs."""
        cand = state.percent / 100.0
        control = cand if self.has_control and state.status in ("running", "paused") and cand < 1.0 else 0.0
        return cand, control

    async def _apply_weights(self, state: ControllerState) -> None:
        await self.traffic.set_weights(*self._shares(state), state.step)

    def status(self) -> dict[str, Any]:
        doc = read_status(self.store, self.state)
        assert doc is not None  # a live state is given
        return doc

    # ---- records from the proxy ---------------------------------------------------------------------------

    def on_record(self, record: ProxiedRequest) -> None:
        """Called by the proxy for every finished upstream attempt (on the event loop)."""
        self._window.append(record)
        self._unsaved.append(record)
        if record.pool == "candidate" and self.state.status in ("running", "paused"):
            self._watch_bursts(record)

    def _watch_bursts(self, record: ProxiedRequest) -> None:
        t = record.received_unix + (record.stream_end_s or 0.0)
        kind: str | None = None
        if record.http_status is not None and record.http_status >= 500 or (record.retried and record.http_status is None):
            kind = "http_5xx_burst"
        elif not record.ok and record.http_status == 200 and not record.client_disconnected:
            kind = "stream_error_burst"
        detector = self._bursts.get(kind) if kind else None
        if detector is not None and kind is not None and detector.add(t):
            self._critical.append(
                CriticalEvent(
                    kind=kind,  # type: ignore[arg-type]  # one of the two burst kinds above
                    server=record.server,
                    count=detector.in_window,
                    threshold=detector.count,
                    # The pool and the server, so that the on-call engineer knows where to look (issue 28).
                    detail=(
                        f"{detector.in_window} {'5xx responses' if kind == 'http_5xx_burst' else 'broken streams'} "
                        f"from the {record.pool} pool within {detector.within_s:g} s (the server named: the last of them)"
                    ),
                )
            )
            # The weight drops at once, before the controller's task gets to the decision and the hooks.
            self.traffic.set_weights_now(0.0, 0.0, self.state.step)  # records come only from the proxy
            self._wake.set()

    def _flush(self) -> None:
        if self._unsaved:
            batch, self._unsaved = self._unsaved, []
            self.store.append_requests(batch)

    # ---- the loop -----------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, exit_when_finished: bool = False) -> CanaryStatus:
        """Run windows until ``stop`` is set (or, with ``exit_when_finished``, until promoted or rolled back)."""
        window_s = self.rollout.analysis.window_s
        read_every = min(window_s / _READS_PER_WINDOW, _MAX_READ_INTERVAL_S)
        loop = asyncio.get_running_loop()
        if self._weights_pending:
            await self._apply_weights(self.state)
            self._weights_pending = False
            self._record_start(self.state)
        await self.evidence.begin(self.clock())
        window_start = self.clock()
        window_t0 = loop.time()
        next_read = window_t0
        next_flush = window_t0 + _FLUSH_S
        last_tick = loop.time()
        while not stop.is_set():
            if exit_when_finished and self.finished.is_set():
                break
            now_m = loop.time()
            if self.state.status == "running":
                self.state.seconds_in_step += now_m - last_tick
            last_tick = now_m
            if now_m >= next_read:
                next_read = now_m + read_every
                if self.state.status in ("running", "paused") and self._engine_lost is None:
                    try:
                        self._critical.extend(await self.evidence.read())
                    except RuntimeFailure as exc:  # behind an engine, its stats are part of the evidence
                        await self._engine_unreachable(exc)
            if self._critical and self.state.status in ("running", "paused"):
                events, self._critical = self._critical, []
                await self._critical_rollback(events)
            while not self._manual.empty():
                action, fut = self._manual.get_nowait()
                try:
                    fut.set_result(await self._manual_action(action))
                except Exception as exc:  # answered to the admin caller, who asked for it
                    fut.set_exception(exc)
            if now_m >= next_flush:
                next_flush = now_m + _FLUSH_S
                self._flush()
            if now_m - window_t0 >= window_s:
                end = self.clock()
                await self._reconcile()
                await self._close_window(window_start, end)
                window_start, window_t0 = end, loop.time()
            timeout = max(0.0, min(next_read, next_flush, window_t0 + window_s) - loop.time())
            self._wake.clear()
            wake = asyncio.ensure_future(self._wake.wait())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({wake, stopping}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            stopping.cancel()
        self._flush()
        self.state.updated_unix = self.clock()
        self.store.save_state(self.state)
        return self.state.status

    def on_stopped(self, still_in_flight: int, *, cut_at_shutdown: int = 0, drain_s: float | None = None) -> None:
        """After the proxy drained: write what finished meanwhile, save the state, and log the stop. Nothing when the
        engine never confirmed the first weights (the state file must not claim a start that did not happen), or
        when the state file was lost (writing would only reach the deleted file)."""
        if self._weights_pending or self._state_file_lost():
            return
        self._flush()
        self.state.updated_unix = self.clock()
        self.store.save_state(self.state)
        deadline = "" if drain_s is None else f" (drain deadline {drain_s:g} s)"
        if cut_at_shutdown:
            why = f"stopped; {cut_at_shutdown} stream(s) cut at shutdown{deadline}, an error of neither pool"
        elif still_in_flight:
            why = f"stopped; {still_in_flight} stream(s) still in flight at the drain deadline{deadline}"
        else:
            why = f"stopped; no stream in flight{deadline}"
        self.store.append_event(
            "stopped",
            time=self.clock(),
            step=self.state.step,
            percent=self.state.percent,
            reasons=[why],
            details={"still_in_flight": still_in_flight, "cut_at_shutdown": cut_at_shutdown, "drain_s": drain_s},
        )

    def _state_file_lost(self) -> bool:
        """Whether the state file is gone or replaced; said once, loudly. From then on no decision is taken: the
        traffic stays at the weights it has, and the operator restarts the controller to recreate the file."""
        if self.state_lost is None and _file_identity(self.store.path) != self._state_identity:
            self.state_lost = f"the state file {self.store.path} was deleted or replaced while the canary ran"
            self.log(
                f"!!! {self.state_lost}: no decision is taken from now on; the traffic stays at {self.state.percent:g} % "
                "for the candidate; stop and restart the controller (it will start a new state)"
            )
        return self.state_lost is not None

    async def _close_window(self, start: float, end: float) -> None:
        if self._state_file_lost():
            self._window = []
            return
        records, self._window = self._window, []
        self._flush()
        if self.state.status not in ("running", "paused"):
            return
        # Looks are spent only by windows that ran a test (analysis.spends_look): no-evidence windows take none.
        look, step = self.state.look + 1, self.state.step
        if self._engine_lost is not None:
            return  # no window is judged while the engine cannot be reached: its counters are part of the evidence
        try:
            judged = await self.evidence.judge(
                records, start, end, look, has_control=self.has_control, percent=self.state.percent
            )
        except RuntimeFailure as exc:
            await self._engine_unreachable(exc)
            return
        analysis, gauges, acceptance = judged.analysis, judged.gauges, judged.acceptance
        counts = dict(judged.counts)
        if self.state.status not in ("running", "paused") or self.state.step != step:
            return  # rolled back, promoted or moved by the operator while the window was judged: it no longer applies
        if spends_look(analysis):
            self.state.look = look
        for r in records:
            counts[r.pool] = counts.get(r.pool, 0) + 1
        self.state.requests_in_step += sum(
            1 for r in records if r.pool == "candidate" and not r.retried and r.step == self.state.step
        )
        self.state.requests_in_step += judged.candidate_requests
        failures = [r for r in analysis.results if r.verdict == "FAIL"]
        window = WindowRecord(
            step=self.state.step, verdict=analysis.verdict, failures=failures, why_inconclusive=why_inconclusive(analysis)
        )
        self.state.windows.append(window.model_dump(mode="json"))
        self.store.append_event(
            "window",
            time=end,
            step=self.state.step,
            percent=self.state.percent,
            reasons=[f"window {analysis.look}: {analysis.verdict} ({analysis.comparison} comparison)", *analysis.warnings],
            details={
                "analysis": analysis.model_dump(mode="json"),
                "window_start_unix": start,
                "window_end_unix": end,
                "counts": counts,
                "gauges": gauges,
                "acceptance": acceptance,
            },
        )
        self.log(f"window {analysis.look}: {analysis.verdict}; " + "; ".join(r.text for r in failures[:3]))
        windows = [WindowRecord.model_validate(w) for w in self.state.windows]
        progress = StepProgress(
            step=self.state.step, seconds_in_step=self.state.seconds_in_step, requests_in_step=self.state.requests_in_step
        )
        decision = decide(self.rule, progress, windows)
        if self.state.status == "paused" and decision.kind in ("advance", "promote"):
            paused = CanaryReason(code="paused", text="paused: no automatic advance or promotion until resumed")
            decision = Decision(
                kind="hold", step=self.state.step, percent=self.state.percent, reasons=[paused, *decision.reasons]
            )
        await self._act(decision, comparison=analysis.comparison)

    # ---- the engine is the truth (issue 28) --------------------------------------------------------------

    async def _reconcile(self) -> None:
        """Each window: read the engine back. Drift is re-applied once (a ``drift`` event); if the engine still
        differs, the rollout pauses with a critical event naming what the engine reports. An engine that cannot be
        reached pauses the rollout; once it answers again, the candidate is set to 0 % and the rollout stays paused
        until the operator resumes (``engine`` events say each step)."""
        if self.state.status not in ("running", "paused") or self._weights_pending:
            return
        shares = self._shares(self.state)
        try:
            drift = await self.traffic.differs(*shares)
        except RuntimeFailure as exc:
            await self._engine_unreachable(exc)
            return
        if self._engine_lost is not None:
            await self._engine_back()
            return
        if drift is None:
            return
        self.log(f"!!! engine drift: {drift}; re-applying the weights of step {self.state.step + 1}")
        try:
            await self._apply_weights(self.state)
            still = await self.traffic.differs(*shares)
        except RuntimeFailure as exc:
            still = str(exc)
        # the event after the weights went back, so that what it says ("applied again") is true when it is read
        self._event("drift", [f"the engine reports {drift}; the step's weights were applied again"], {"reported": drift})
        if still is not None:
            self._pause_critical(f"the engine still reports {still} after the weights were applied again")

    async def _engine_unreachable(self, exc: Exception) -> None:
        if self._engine_lost is not None:
            return  # said once; the next read that answers says it is back
        self._engine_lost = str(exc)
        self._pause_critical(f"the engine cannot be reached: {exc}", kind="engine")

    async def _engine_back(self) -> None:
        lost, self._engine_lost = self._engine_lost, None
        try:
            await self.traffic.set_weights(0.0, 0.0, self.state.step)
        except RuntimeFailure as exc:
            self._engine_lost = lost
            self.log(f"!!! the engine answers again but did not take the candidate's 0 %: {exc}")
            return
        text = (
            f"the engine answers again (it could not be reached: {lost}); the candidate is at 0 % and the rollout stays "
            f"paused at step {self.state.step + 1} until the operator resumes"
        )
        self._event("engine", [text], {"lost": lost, "candidate_percent": 0.0})
        self.log(text)

    def _pause_critical(self, text: str, kind: EventKind = "critical") -> None:
        st = self.state
        st.status = "paused"
        st.updated_unix = self.clock()
        self.store.save_state(st)
        self._event(kind, [f"{text}; paused"], {"kind": "engine_unreachable" if kind == "engine" else "engine_drift"})
        self.log(f"!!! {text}; the rollout is paused (canary status, canary resume)")

    def _event(self, kind: EventKind, reasons: list[str], details: dict[str, Any]) -> None:
        self.store.append_event(
            kind, time=self.clock(), step=self.state.step, percent=self.state.percent, reasons=reasons, details=details
        )

    async def _critical_rollback(self, events: Sequence[CriticalEvent]) -> None:
        for e in events:
            self.store.append_event(
                "critical",
                time=self.clock(),
                step=self.state.step,
                percent=self.state.percent,
                reasons=[e.detail or e.kind],
                details=e.model_dump(mode="json"),
            )
        windows = [WindowRecord.model_validate(w) for w in self.state.windows]
        progress = StepProgress(
            step=self.state.step, seconds_in_step=self.state.seconds_in_step, requests_in_step=self.state.requests_in_step
        )
        await self._act(decide(self.rule, progress, windows, critical=events), comparison=None)

    # ---- acting on a decision -----------------------------------------------------------------------------

    async def _act(self, decision: Decision, *, comparison: str | None, by: str | None = None) -> None:
        now = self.clock()
        st = self.state
        before = st.percent
        if decision.kind == "rollback":
            await self.traffic.set_weights(0.0, 0.0, st.step)  # new requests first; the bookkeeping follows
            st.status, st.percent = "rolled_back", 0.0
        elif decision.kind == "promote":
            st.status, st.percent = "promoted", 100.0
        elif decision.kind == "advance":
            st.step, st.percent = decision.step, decision.percent
            st.step_started_unix, st.seconds_in_step, st.requests_in_step = now, 0.0, 0
        st.updated_unix = now
        details: dict[str, Any] = {"decision": decision.model_dump(mode="json"), "comparison": comparison}
        if by:
            details["by"] = by
        reasons = [r.text for r in decision.reasons]
        if decision.kind == "rollback" and (note := self.traffic.weights_note()) is not None:
            reasons.append(note)  # e.g. a Gateway route written but not applied: the rollback is not done yet
            details["engine_note"] = note
        self._decided(
            st,
            "decision",
            time=now,
            decision=decision.kind,
            reasons=reasons,
            details=details,
            from_percent=before,
        )
        self.traffic.count_decision(decision.kind)
        if decision.kind != "hold":
            self.log(f"{_move_text(decision)}: " + "; ".join(r.text for r in decision.reasons[:4]))
        if decision.kind in ("advance", "promote"):
            await self._apply_weights(st)
        if decision.kind == "rollback":
            await self._drain_candidate()
            await self._run_hooks("rollback", self.rollout.hooks.rollback, decision, before)
            self.finished.set()
        elif decision.kind == "promote":
            await self._run_hooks("promote", self.rollout.hooks.promote, decision, before)
            self.finished.set()

    async def _drain_candidate(self) -> None:
        """Wait for the candidate's (and control's) streams in flight to finish, up to ``drain_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s
        while loop.time() < deadline:
            flight = await self.traffic.in_flight()
            if flight is None:
                # The engine does not count streams (a Gateway): wait the whole drain_s, so that a rollback hook's
                # `systemctl stop` does not cut the candidate's streams (before issue 28 the hooks ran at once).
                self.log(f"rollback: the engine does not count streams in flight; waiting the drain_s of {self.drain_s:g} s")
                await asyncio.sleep(max(0.0, deadline - loop.time()))
                self._drain_note = f"waited drain_s ({self.drain_s:g} s): the engine does not count streams"
                return
            if flight.get("candidate", 0) == 0 and flight.get("control", 0) == 0:
                self._drain_note = "the candidate's streams had finished (the engine's count)"
                return
            await asyncio.sleep(self.traffic.drain_poll_s)
        self._drain_note = f"streams still in flight after drain_s ({self.drain_s:g} s)"
        self.log(f"rollback: candidate streams still in flight after {self.drain_s:g} s; running the hooks anyway")

    async def _run_hooks(
        self, phase: str, commands: Sequence[Sequence[str]], decision: Decision, from_percent: float
    ) -> list[HookResult]:
        if not commands:
            return []
        h = self.rollout.hooks
        # An explicit environment, never a token variable; output scanned for every token's value (canary.hook_env).
        described = {
            "hook": phase,
            "rollout": self.rollout.name,
            "step": str(decision.step),
            "percent": f"{from_percent:g}",  # the candidate's weight when the decision was taken
            "reason": decision.reasons[0].text if decision.reasons else "",
            "state": str(self.rollout.state.path),
        }
        env = hook_environment(self.rollout, described)
        secrets = token_values(self.rollout, os.environ)
        results = [
            dataclasses.replace(
                r, argv=[redact(a, secrets) for a in r.argv], stdout=redact(r.stdout, secrets), stderr=redact(r.stderr, secrets)
            )
            for r in await self.hook_runner(commands, timeout_s=h.timeout_s, retries=h.retries, env=env)
        ]
        for r in results:
            failed = not r.ok
            timed_out = " (timed out)" if r.timed_out else ""
            self.store.append_event(
                "hook",
                time=self.clock(),
                step=self.state.step,
                percent=self.state.percent,
                reasons=[f"{phase} hook {'FAILED' if failed else 'ok'}: {r.argv[0]} exit {r.exit_code}{timed_out}"],
                details={
                    "phase": phase,
                    "drain": self._drain_note if phase == "rollback" else None,
                    "argv": list(r.argv),
                    "exit_code": r.exit_code,
                    "timed_out": r.timed_out,
                    "stdout": r.stdout,
                    "stderr": r.stderr,
                    "duration_s": r.duration_s,
                    "attempt": r.attempt,
                },
            )
            if failed:
                self.log(
                    f"!!! {phase} hook FAILED: {list(r.argv)} exit {r.exit_code}{' (timed out)' if r.timed_out else ''}: "
                    f"{(r.stderr or r.stdout).strip()[-500:]}"
                )
        return results

    # ---- manual control -----------------------------------------------------------------------------------

    async def request(self, action: str) -> dict[str, Any]:
        """An admin action (pause, resume, promote, rollback), carried out by the controller's own task."""
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        await self._manual.put((action, fut))
        self._wake.set()
        return await fut

    async def _manual_action(self, action: str) -> dict[str, Any]:
        st = self.state
        now = self.clock()
        if st.status in ("promoted", "rolled_back"):
            raise ManualActionRefused(f"the rollout is already {st.status.replace('_', ' ')}")
        self.store.append_event(
            "manual",
            time=now,
            step=st.step,
            percent=st.percent,
            reasons=[f"{action} asked through the admin API"],
            details={"action": action},
        )
        if action in ("pause", "resume"):
            if (action == "pause") == (st.status == "paused"):
                raise ManualActionRefused(f"the rollout is already {'paused' if action == 'pause' else 'running'}")
            st.status = "paused" if action == "pause" else "running"
            st.updated_unix = now
            reason = f"{action}d by the operator at {st.percent:g} %"
            self._decided(
                st, "decision", time=now, decision=action, reasons=[reason], details={"by": "admin-api"}, from_percent=st.percent
            )
            self.traffic.count_decision(action)
            self.log(reason)
        elif action in ("promote", "rollback"):
            code = "manual_promote" if action == "promote" else "manual_rollback"
            text = f"{action} asked by the operator at {st.percent:g} %"
            percent = 100.0 if action == "promote" else 0.0
            decision = Decision(kind=action, step=st.step, percent=percent, reasons=[CanaryReason(code=code, text=text)])  # type: ignore[arg-type]
            await self._act(decision, comparison=None, by="admin-api")
        else:
            raise ManualActionRefused(f"unknown action {action!r}")
        return self.status()


class ManualActionRefused(Exception):
    """An admin action that does not apply to the rollout's state (answered 409)."""
