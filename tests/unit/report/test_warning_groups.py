"""Warnings grouped by kind, with counts and the worst value, the same in the terminal, report.md and report.html."""

from __future__ import annotations

from specguard.check.report import build_report_data
from specguard.report.build.warning_groups import group_warnings
from specguard.report.render.html import render_html
from specguard.report.render.markdown import render_markdown
from specguard.report.render.verdict_terminal import render_terminal
from specguard.results.models import WarningNote
from tests.unit.report.test_report import make_check

LAG = "client event-loop lag p99 {v:.1f} ms exceeds 10 ms: the client may be the bottleneck and its timestamps late"


def test_24_lag_warnings_are_one_line_with_the_worst_and_where():
    warnings = [
        f"{t} / {s}: {arm}: " + LAG.format(v=v)
        for t, s, arm, v in [
            (t, s, arm, 11.0 + i + 20 * j + (130 if (t, s, arm) == ("steady", "production", "candidate") else 0))
            for j, (t, s) in enumerate([("idle", "greedy"), ("steady", "production"), ("burst", "greedy")])
            for arm in ("baseline", "candidate")
            for i in range(4)
        ]
    ]
    assert len(warnings) == 24
    # each warning comes with its data, made where the sentence is made (analysis.summarize, check.aggregate, verdict.decide)
    values = [
        11.0 + i + 20 * j + (130 if (t, s, arm) == ("steady", "production", "candidate") else 0)
        for j, (t, s) in enumerate([("idle", "greedy"), ("steady", "production"), ("burst", "greedy")])
        for arm in ("baseline", "candidate")
        for i in range(4)
    ]
    wheres = [
        f"{t} / {s} / {arm}"
        for t, s in [("idle", "greedy"), ("steady", "production"), ("burst", "greedy")]
        for arm in ("baseline", "candidate")
        for _ in range(4)
    ]
    notes = [
        WarningNote(kind="client_event_loop_lag", text=w, value=v, limit=10, where=at)
        for w, v, at in zip(warnings, values, wheres, strict=True)
    ]
    [g] = group_warnings(warnings, notes, runs=24)
    assert g.line == "client event-loop lag above 10 ms in 24 of 24 runs, worst 164 ms at steady / production / candidate"
    assert g.texts == warnings  # nothing is lost: every sentence stays in its group


def test_kinds_are_kept_apart_and_an_unknown_warning_keeps_its_text():
    warnings = [
        "steady / greedy: candidate: client send lag p99 40.0 ms exceeds 10 ms: the client did not release requests",
        "steady / greedy / chat: acceptance rate 0.31 < 0.5, speculation is likely net-negative",
        "burst / greedy / chat: acceptance rate 0.12 < 0.5, speculation is likely net-negative",
        "the model is not pinned (no revision, no local content hash): a hub update would go unnoticed",
    ]
    notes = [
        WarningNote(kind="client_send_lag", text=warnings[0], value=40.0, limit=10, where="steady / greedy / candidate"),
        WarningNote(kind="low_acceptance", text=warnings[1], value=0.31, limit=0.5, where="steady / greedy / chat"),
        WarningNote(kind="low_acceptance", text=warnings[2], value=0.12, limit=0.5, where="burst / greedy / chat"),
    ]  # the fourth has no note: a group of its own, its sentence as it was
    groups = group_warnings(warnings, notes, runs=8, cells=4)
    lines = [g.line for g in groups]
    assert lines == [
        "client send lag above 10 ms in 1 of 8 runs, worst 40 ms at steady / greedy / candidate",
        "acceptance rate below 0.5 in 2 of 4 cells, worst 0.12 at burst / greedy / chat",  # lower is worse here
        warnings[3],
    ]
    assert groups[0].worst_where == "steady / greedy / candidate"


def test_every_renderer_shows_the_grouped_line(tmp_path):
    """Two candidate runs with a late client: one line, '2 of 4 runs', the worst run named, in all three outputs."""
    record, out = make_check(tmp_path / "c", candidate_send_lag_s=(0.05, 0.2))
    data = build_report_data(record, out)
    v = data.verdict
    assert len([w for w in v.warnings if "send lag" in w]) == 2
    [g] = [g for g in v.warning_groups if g.kind == "client_send_lag"]
    assert g.count == 2 and g.out_of == 4 and g.worst == 200.0
    assert g.line == "client send lag above 10 ms in 2 of 4 runs, worst 200 ms at steady / greedy / candidate"
    assert g.line in render_markdown(data)
    assert g.line in render_html(data)
    assert g.line in render_terminal(v, "report.html")
