"""One screen of reasons: a verdict of many reasons, grouped by kind, fits twelve terminal lines."""

from __future__ import annotations

from html import escape

import pytest

from specguard.check.plan import Guardrails, Objective
from specguard.check.report import build_report_data
from specguard.report.model.data import ReportData, VerdictFile
from specguard.report.render.html import render_html
from specguard.report.render.markdown import render_markdown
from specguard.report.render.verdict_terminal import render_terminal
from specguard.verdict import decide, model
from specguard.verdict.reason_groups import group_reasons
from tests.unit.report.test_report import make_check
from tests.unit.verdict.test_decide import cell, rr

LEVELS = [("steady", 2.0), ("busy", 8.0), ("burst", 32.0)]


def _many_reasons_verdict():
    """12 cells (3 levels x 2 samplings x 2 segments), every guardrail per cell (scope: cell): P99 E2E and the
    error rate (0 errors) straddle their budgets, P99 TTFT is unverified, the objective undersampled at the 8
    target cells, and two cells' P99 TTFT regressed: NO-GO with 44 reasons, every one kept."""
    cells = []
    for traffic, load in LEVELS:
        for sampling in ("prod", "greedy"):
            for segment in ("chat", "code"):
                n = 48 if traffic == "burst" else 96
                bad = traffic == "burst" and segment == "chat"
                unverified = rr(1.0, 0.9, 1.1, enough=False, n=n, more=500 - n)
                straddles = rr(1.0, 0.9, 1.1, n=n)
                c = cell(
                    traffic=traffic,
                    load=load,
                    segment=segment,
                    target=traffic != "burst",
                    obj=rr(0.7, 0.6, 0.8, enough=False, n=n, more=400 - n),
                    e2e=straddles,
                    ttft=rr(3.0, 2.5, 3.5) if bad else unverified,
                    err=(0, 0),
                    n_req=(n, n),
                )
                cells.append(c.model_copy(update={"sampling": sampling}))
    return decide(cells, Objective(), Guardrails(scope="cell"))


def _file(v, **kw) -> VerdictFile:
    return VerdictFile(
        **v.model_dump(exclude={"reasons", "warnings", "crossover", "tests", "undecided"}),
        reasons=v.reason_texts,
        reason_details=v.reasons,
        reason_groups=group_reasons(v.reasons),
        warnings=v.warnings,
        crossover=v.crossover,
        plan="p",
        exit_code=1,
        inventory={},
        cells=[],
        commands=[],
        definitions={},
        **kw,
    )


def test_a_verdict_of_36_reasons_fits_twelve_lines_and_names_every_deciding_place_and_group():
    v = _many_reasons_verdict()
    assert v.verdict == "NO-GO" and len(v.reasons) >= 36, len(v.reasons)
    groups = group_reasons(v.reasons)
    assert sum(g.count for g in groups) == len(v.reasons)  # every reason in exactly one group
    assert sorted(i for g in groups for i in g.members) == list(range(len(v.reasons)))
    deciding = [g for g in groups if g.deciding]
    assert deciding and all(not v.reasons[i].secondary for g in deciding for i in g.members)
    assert all(v.reasons[i].secondary for g in groups if not g.deciding for i in g.members)
    (ttft,) = deciding
    assert ttft.kind == "guardrail_regressed" and ttft.count == 2 and "x3.00" in ttft.text
    term = render_terminal(_file(v), "report.html")
    lines = term.splitlines()
    assert len(lines) <= 12, term
    for r in v.reasons:
        if not r.secondary:
            assert r.cell is not None and r.cell in term
    for g in groups:  # every group, with its count and ranges, even past the fifth line
        assert g.text in term
    assert "12 cells:" in term and "(also report.md, verdict.json)" in lines[-1]


def test_the_error_rate_group_gives_the_range_of_requests_and_errors():
    v = _many_reasons_verdict()
    (err,) = [g for g in group_reasons(v.reasons) if g.metric == "error_rate"]
    assert err.count == 12 and not err.deciding and "12 cells" in err.text
    assert "0 errors per arm" in err.text and "48-96 requests per arm" in err.text and "CI -" in err.text


def test_a_sequential_check_says_where_it_was_decided_in_one_line():
    v = _many_reasons_verdict()
    looks = [
        model.LookRecord(index=1, of=5, requests_per_arm=432, verdict="INCONCLUSIVE", alpha_go=0.001, alpha_nogo=0.002),
        model.LookRecord(
            index=2,
            of=5,
            requests_per_arm=864,
            verdict="NO-GO",
            alpha_go=0.005,
            alpha_nogo=0.01,
            tests=[model.TestAtLook(name="P99 TTFT at level 'burst'", ci_low=2.5, ci_high=3.5, p_value=0.001, outcome="beyond")],
        ),
    ]
    term = render_terminal(_file(v, looks=looks), "r.html")
    assert "decided at look 2 of 5, 864 requests per arm" in term and len(term.splitlines()) <= 12


LOOKS = [
    model.LookRecord(index=1, of=5, requests_per_arm=432, verdict="INCONCLUSIVE", alpha_go=0.0004, alpha_nogo=0.0008),
    model.LookRecord(
        index=2,
        of=5,
        requests_per_arm=864,
        verdict="NO-GO",
        alpha_go=0.0041,
        alpha_nogo=0.0082,
        tests=[
            model.TestAtLook(name="P99 TTFT at level 'burst'", ci_low=2.5, ci_high=3.5, p_value=0.0001, outcome="beyond"),
            model.TestAtLook(name="error rate over the whole check", ci_low=-0.007, ci_high=0.007, outcome="within"),
        ],
    ),
]


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> ReportData:
    """A real check's report data, its verdict replaced by the 39-reason one, with two looks."""
    record, out = make_check(tmp_path_factory.mktemp("reasons") / "c")
    data = build_report_data(record, out)
    v = _many_reasons_verdict()
    update = {
        "verdict": "NO-GO",
        "reasons": v.reason_texts,
        "reason_details": v.reasons,
        "reason_groups": group_reasons(v.reasons),
        "looks": LOOKS,
    }
    return data.model_copy(update={"verdict": data.verdict.model_copy(update=update)})


def test_report_md_groups_the_reasons_and_keeps_every_sentence_and_the_looks(grouped: ReportData) -> None:
    md = render_markdown(grouped)
    v = grouped.verdict
    for g in v.reason_groups:
        assert f"- {g.text}" in md or (g.count == 1 and f"- {v.reasons[g.members[0]]}" in md)
    assert all(f"  - {r}" in md or f"- {r}" in md for r in v.reasons)  # every sentence, under its group
    assert md.index(v.reason_groups[0].text) < md.index(v.reason_groups[-1].text)  # deciding first
    assert "## Looks (sequential check)" in md
    assert "| 2 of 5 | 864 | NO-GO | 0.0041 | 0.0082 | P99 TTFT at level 'burst' | 2.5 to 3.5 | 0.0001 | beyond |" in md
    assert "| 1 of 5 | 432 | INCONCLUSIVE |" in md


def test_report_html_folds_each_groups_sentences_and_shows_the_looks(grouped: ReportData) -> None:
    html = render_html(grouped)
    v = grouped.verdict
    for g in v.reason_groups:
        if g.count > 1:
            assert f"{escape(g.text)}<details><summary>the {g.count} reasons</summary>" in html
    assert all(f"<li>{escape(r)}</li>" in html for r in v.reasons)
    assert '<table id="looks">' in html and "error rate over the whole check" in html and "864" in html


def test_level_and_whole_check_reasons_group_by_level_with_their_ranges():
    def unverified(level, n):
        numbers = {"requests_per_arm": n, "more_requests_needed": 500 - n}
        text = f"P99 TTFT at level '{level}' unverified: {n} requests per arm, {500 - n} more needed"
        return model.Reason(code="guardrail_unverified", level=level, metric="P99 TTFT", numbers=numbers, text=text)

    err = {"errors_baseline": 0, "requests_baseline": 576, "errors_candidate": 0, "requests_candidate": 576}
    reasons = [
        unverified("steady", 96),
        unverified("busy", 64),
        unverified("burst", 29),
        model.Reason(
            code="error_rate_unresolved",
            metric="error_rate",
            numbers=err | {"ci_low": -0.0066, "ci_high": 0.0066, "budget": 0.005},
            text="error rate at the whole check straddles its budget",
        ),
    ]
    ttft, rate = group_reasons(reasons)
    assert ttft.text == "P99 TTFT: unverified at 3 levels, 29-96 requests per arm, 404-471 more needed"
    assert ttft.places == ["level steady", "level busy", "level burst"] and ttft.members == [0, 1, 2]
    assert rate.text == (
        "error rate: straddles its budget over the whole check, 576 requests per arm, 0 errors per arm, CI -0.7 to +0.7 points"
    )
    assert ttft.deciding and rate.deciding  # an INCONCLUSIVE's reasons: each one a further look could resolve
    nogo = [
        reasons[0].model_copy(update={"code": "guardrail_regressed"}),
        *[r.model_copy(update={"secondary": True}) for r in reasons[1:3]],
    ]
    kinds = [(g.kind, g.deciding, g.count) for g in group_reasons(nogo)]
    assert kinds == [("guardrail_regressed", True, 1), ("guardrail_unverified", False, 2)]
