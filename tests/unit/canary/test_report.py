"""The canary report: a rollout that rolls back, logged through the real models, rendered by the pure renderers.

The windows are real ``analyse_window`` results on synthetic pools (a candidate 30 % slower per token), the
decisions real ``decide`` results on them, and the events, state and requests the record models of
canary/state/records.py, so every shape the report reads is the one the controller writes.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pytest

from specguard.analysis.percentiles import percentiles
from specguard.analysis.request_metrics import per_token_itl
from specguard.canary.judge.decision import CriticalEvent, Decision, RolloutRule, StepProgress, StepRule, WindowRecord, decide
from specguard.canary.judge.window import AnalysisPolicy, MetricRule, WindowAnalysis, analyse_window, error_control_text
from specguard.canary.spec.rollout import Rollout
from specguard.canary.state.records import CanaryEvent, ControllerState, ProxiedRequest
from specguard.errors import OutputExistsError
from specguard.number_format import fmt, fmt_percent
from specguard.report.build.canary import build_canary_report_data, write_canary_report
from specguard.report.render.canary_html import render_canary_html
from specguard.report.render.canary_markdown import render_canary_markdown
from tests.unit.canary.test_analysis import one_segment, pool

T0 = 1_700_000_000.0
WINDOW_S = 60.0
POLICY = AnalysisPolicy(metrics=[MetricRule(metric="itl_ms"), MetricRule(metric="e2e_ms")], resamples=200, max_looks=10)
RULE = RolloutRule(steps=[StepRule(percent=5, min_seconds=0, min_requests=0), StepRule(percent=100)])
ROLLOUT = Rollout.model_validate(
    {
        "name": "spec-rollout",
        "pools": {"baseline": {"servers": ["http://127.0.0.1:8001"]}, "candidate": {"servers": ["http://127.0.0.1:8002"]}},
        "steps": [5, 100],
        "admin": {"token_env": "CANARY_TOKEN"},
    }
)
META = {"rollout_name": ROLLOUT.name, "rollout": ROLLOUT.model_dump(mode="json"), "created_unix": T0}
INVENTORIES = {
    "baseline": {"model": "m", "vllm_version": "0.11.0", "speculative_config": None},
    "candidate": {"model": "m", "vllm_version": "0.11.0", "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}},
}


class Log:
    """Events appended as the controller would: seq in order, one window every WINDOW_S."""

    def __init__(self) -> None:
        self.events: list[CanaryEvent] = []

    def add(self, kind: str, t: float, percent: float, **kw: Any) -> CanaryEvent:
        e = CanaryEvent(seq=len(self.events), time=t, kind=kind, step=kw.pop("step", 0), percent=percent, **kw)  # type: ignore[arg-type]
        self.events.append(e)
        return e


def request(seq: int, pool_name: str, rng: np.random.Generator, ok: bool = True) -> ProxiedRequest:
    ttft = 0.05 * float(rng.lognormal(0, 0.2))
    times = [ttft + 0.02 * i * (1.3 if pool_name == "candidate" else 1.0) for i in range(6)]
    return ProxiedRequest(
        seq=seq,
        request_id=f"r{seq}",
        attempt=1,
        retried=False,
        received_unix=T0 + seq,
        pool=pool_name,  # type: ignore[arg-type]
        server="http://127.0.0.1:8002" if pool_name == "candidate" else "http://127.0.0.1:8001",
        step=0,
        candidate_weight=0.05,
        segment="all",
        api="completions",
        stream=True,
        in_flight=seq % 4,
        ok=ok,
        error=None if ok else "upstream reset",
        http_status=200 if ok else None,
        ttft_s=times[0] if ok else None,
        e2e_s=times[-1] if ok else None,
        stream_end_s=times[-1] if ok else None,
        chunk_times_s=times if ok else [],
        chunk_tokens=[1, 1, 2, 1, 2, 1] if ok else [],
        token_source="server_usage" if ok else None,
        prompt_tokens=10,
        output_tokens=8 if ok else None,
        finish_reason="length" if ok else None,
    )


def rollback_scenario() -> tuple[ControllerState, list[CanaryEvent], list[WindowAnalysis], list[Decision], list[ProxiedRequest]]:
    rng = np.random.default_rng(7)
    log = Log()
    log.add("started", T0, 5.0, details={"resumed": False, "weight": 5.0, "step": 0})
    analyses, decisions, records = [], [], []
    for look in (1, 2):
        segments = one_segment(pool(rng, 400, in_flight=(0, 8)), pool(rng, 200, slowdown=1.3, in_flight=(0, 8)))
        a = analyse_window(POLICY, segments, look, seed=look)
        start = T0 + (look - 1) * WINDOW_S
        details = {
            "analysis": a.model_dump(mode="json"),
            "window_start_unix": start,
            "window_end_unix": start + WINDOW_S,
            "counts": {"baseline": 400, "candidate": 200},
            "gauges": {
                "baseline": {"requests_waiting": 1.0, "kv_cache_usage": 0.4},
                "candidate": {"requests_waiting": 0.0, "kv_cache_usage": float("nan")},
            },
            "acceptance": {"baseline": None, "candidate": 0.62},
        }
        log.add("window", start + WINDOW_S, 5.0, details=details)
        records.append(WindowRecord(step=0, verdict=a.verdict, failures=[r for r in a.results if r.verdict == "FAIL"]))
        d = decide(RULE, StepProgress(step=0, seconds_in_step=look * WINDOW_S, requests_in_step=look * 200), records)
        log.add(
            "decision",
            start + WINDOW_S + 0.1,
            d.percent,
            decision=d.kind,
            step=d.step,
            reasons=[r.text for r in d.reasons],
            details={"decision": d.model_dump(mode="json")},
        )
        analyses.append(a)
        decisions.append(d)
    t = T0 + 2 * WINDOW_S + 1
    hook = {
        "argv": ["systemctl", "stop", "vllm-cand"],
        "exit_code": 3,
        "timed_out": False,
        "stdout": "",
        "stderr": "unit vllm-cand not loaded",
        "duration_s": 0.2,
        "attempt": 1,
        "phase": "rollback",
    }
    log.add("hook", t, 0.0, details=hook)
    log.add("stopped", t + 1, 0.0, details={"why": "rolled back"})
    state = ControllerState(
        status="rolled_back",
        step=0,
        percent=0.0,
        step_started_unix=T0,
        look=2,
        windows=[r.model_dump(mode="json") for r in records],
        updated_unix=t + 1,
    )
    requests = [request(i, "candidate" if i % 10 == 0 else "baseline", rng, ok=i != 31) for i in range(60)]
    return state, log.events, analyses, decisions, requests


@pytest.fixture(scope="module")
def scenario():
    return rollback_scenario()


def test_the_markdown_holds_every_decision_reason_ratio_and_the_error_control(scenario):
    state, events, analyses, decisions, requests = scenario
    assert [d.kind for d in decisions] == ["hold", "rollback"], "the scenario must fail twice to roll back"
    data = build_canary_report_data(META, state, events, requests, INVENTORIES)
    md = render_canary_markdown(data)
    for d in decisions:
        assert f"**{d.kind}**" in md
        for r in d.reasons:
            assert r.text in md
    for a in analyses:
        for r in a.results:
            head = f"| {r.segment} | {r.metric} | {r.comparison} | "
            if r.metric == "error_rate":
                assert head + f"{fmt_percent(r.baseline_value, 2)} / {fmt_percent(r.candidate_value, 2)} | - |" in md
            else:
                assert r.ratio is not None
                interval = f"[{fmt(r.ratio.ci_low, 3)}, {fmt(r.ratio.ci_high, 3)}]"
                values = f"{fmt(r.baseline_value)} / {fmt(r.candidate_value)} ms"
                assert f"{head}{values} | {fmt(r.ratio.ratio, 3)} | {interval} |" in md
    assert data.error_control == error_control_text(POLICY) and error_control_text(POLICY) in md
    # the plain-words summary names the step's weight, the run of failures and the failing ratio with its interval
    itl = next(r for r in decisions[-1].reasons if r.metric == "p99_itl_ms")
    assert data.summary.startswith("rolled back at 5 % after 2 failing windows: ")
    assert (
        f"p99 ITL {fmt(itl.numbers['ratio'])}x baseline [{fmt(itl.numbers['ci_low'])}, {fmt(itl.numbers['ci_high'])}]"
        in data.summary
    )
    assert "**FAILED** rollback hook `systemctl stop vllm-cand`" in md and "unit vllm-cand not loaded" in md
    assert data.failed_hooks == 1 and "1 hook run FAILED" in data.summary


def test_weight_pools_and_inventories_come_from_the_events_requests_and_dicts_given(scenario):
    state, events, _, _, requests = scenario
    data = build_canary_report_data(META, state, events, requests, INVENTORIES)
    assert [(p.percent, p.cause) for p in data.weight_changes] == [(5.0, "started"), (0.0, "decision rollback")]
    assert data.weight[-1].percent == state.percent and data.weight[-1].cause == "state: rolled_back"
    cand = next(p for p in data.pools if p.pool == "candidate")
    mine = [r for r in requests if r.pool == "candidate"]
    assert cand.attempts == len(mine) and cand.errors == sum(not r.ok for r in mine)
    assert cand.itl_ms == percentiles(
        [v for r in mine if r.ok for v in per_token_itl(r.chunk_times_s, r.chunk_tokens)], scale=1000.0
    )
    base = next(p for p in data.pools if p.pool == "baseline")
    assert base.errors == 1 and base.errors_by_message == {"upstream reset": 1}
    rows = dict(data.inventories[1].rows)
    assert rows["speculative_config.method"] == "ngram" and rows["vllm_version"] == "0.11.0"
    md = render_canary_markdown(data)
    assert "| speculative_config.num_speculative_tokens | 4 |" in md


def _no_nan(text: str) -> None:
    assert not re.search(r"\bnan\b", text, re.IGNORECASE), re.search(r".{80}\bnan\b.{40}", text, re.IGNORECASE | re.DOTALL)


def _page_body(html: str) -> str:
    # plotly.js itself mentions NaN; the report's own text and chart data come after its script
    return html.split("</head>", 1)[1]


def test_undefined_numbers_render_as_dashes_never_nan(scenario):
    """A NaN interval end (an undefined bound) and a log written with JSON nulls for NaN both render as "-"."""
    state, events, _, _, requests = scenario
    window = events[1]
    raw = json.loads(json.dumps(window.details["analysis"]))
    raw["results"][0]["ratio"]["ci_high"] = math.nan
    nan_window = window.model_copy(update={"details": {**window.details, "analysis": raw}})
    as_json = json.loads(WindowAnalysis.model_validate(raw).model_dump_json())  # pydantic writes NaN as null
    null_window = window.model_copy(update={"seq": 3, "details": {**window.details, "analysis": as_json}})
    data = build_canary_report_data(META, state, [events[0], nan_window, null_window], requests, INVENTORIES)
    assert data.windows[0].results[0].ci_high is None and data.windows[1].results[0].ci_high is None
    assert data.windows[0].gauges["candidate"]["kv_cache_usage"] is None
    md, html = render_canary_markdown(data), render_canary_html(data)
    _no_nan(md)
    _no_nan(_page_body(html))
    assert f"[{fmt(data.windows[0].results[0].ci_low, 3)}, -]" in md


def test_a_running_rollout_says_where_it_stands_and_why_it_holds(scenario):
    state, events, analyses, decisions, requests = scenario
    running = state.model_copy(update={"status": "running", "percent": 5.0, "updated_unix": events[2].time})
    data = build_canary_report_data(META, running, events[:3], requests, {})
    assert data.summary.startswith(f"running at 5 % (step 1 of 2), 1 window analysed, the latest {analyses[0].verdict}")
    assert f"holding: {decisions[0].reasons[0].text}" in data.summary
    assert "No hook ran." in render_canary_markdown(data)


@pytest.mark.parametrize("how", ["critical", "manual"])
def test_a_rollback_without_failing_windows_says_what_rolled_it_back(scenario, how):
    state, events, _, _, requests = scenario
    started = events[0]
    t = started.time + 5
    if how == "critical":
        crit = CriticalEvent(kind="oom", server="http://127.0.0.1:8002", detail="CUDA out of memory")
        d = decide(RULE, StepProgress(step=0, seconds_in_step=5, requests_in_step=3), [], [crit])
        move = CanaryEvent(
            seq=1,
            time=t,
            kind="decision",
            decision="rollback",
            step=0,
            percent=d.percent,
            reasons=[r.text for r in d.reasons],
            details={"decision": d.model_dump(mode="json")},
        )
        expected = f"rolled back at 5 % on a critical condition: {d.reasons[0].text}"
    else:
        move = CanaryEvent(
            seq=1,
            time=t,
            kind="manual",
            decision="rollback",
            step=0,
            percent=0.0,
            reasons=["asked by the operator"],
            details={"by": "admin-api"},
        )
        expected = "rolled back at 5 % by the operator (admin-api): asked by the operator"
    data = build_canary_report_data(META, state.model_copy(update={"updated_unix": t}), [started, move], requests, {})
    assert data.summary == expected
    md = render_canary_markdown(data)
    assert "No window has been analysed yet." in md and "bounds false rollbacks" in data.error_control
    assert f"**rollback**{' by admin-api' if how == 'manual' else ''} ({move.kind}, step 1, 0 %)" in md


def test_the_report_files_are_the_renders_and_are_never_overwritten_silently(scenario, tmp_path):
    data = build_canary_report_data(META, *scenario[:2], scenario[4], INVENTORIES)
    html_path, md_path = write_canary_report(data, tmp_path / "out")
    assert md_path.read_text() == render_canary_markdown(data) and html_path.read_text() == render_canary_html(data)
    md_path.write_text("edited by hand")
    with pytest.raises(OutputExistsError, match="report.html, report.md already exist"):
        write_canary_report(data, tmp_path / "out")
    assert md_path.read_text() == "edited by hand"
    write_canary_report(data, tmp_path / "out", force=True)
    assert md_path.read_text() == render_canary_markdown(data)
