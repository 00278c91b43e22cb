"""The check report's greedy-output table and GPU figures: known outputs and samples in, the exact figures in every format.

A real check directory (test_report.make_check: two arms, two repetitions, 60 requests per run, one greedy cell)
given outputs.jsonl with known divergences and gpu_metrics.jsonl with known readings; report.md, report.html
and the terminal verdict must quote the same figures. The tables' empty cases say why in one line.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specguard.analysis.gpu_usage import gpu_usage
from specguard.check.plan import Equivalence
from specguard.check.record import CheckRecord
from specguard.check.report import build_report_data, write_outputs
from specguard.report.build.greedy_table import NO_GREEDY, NO_OUTPUTS, equivalence_line, equivalence_table
from specguard.report.model.data import ReportData
from specguard.report.render.gpu_table import NOT_SAMPLED
from specguard.report.render.html import render_html
from specguard.report.render.markdown import equivalence_lines, render_markdown
from specguard.report.render.terminal import summary_table
from specguard.report.render.verdict_terminal import render_terminal
from specguard.results.check_dir import CheckDir, cell_key
from specguard.results.models import GpuReading, GpuSample, OutputRecord
from specguard.results.run_dir import RunDir, load_gpu_samples, load_summary
from tests.unit.report.test_report import make_check

KEY = cell_key("steady", "greedy", 0)
CELL = "steady / greedy / default"
N = 60  # requests per run, one prompt item each (make_check)


def _reference(item: int) -> list[int]:
    return [item, 1, 2, 3, 4, 5]


def _diverged(item: int, at: int) -> list[int]:
    ids = _reference(item)
    ids[at] = 999
    return ids


def add_outputs(out: Path) -> None:
    """Baseline rep 1 is the reference; baseline rep 2 differs at 1 item (token 4); the candidate at 9 items
    per repetition (rep 1 at token 2, rep 2 at token 1): 18 of 120 against the baseline's 1 of 60."""
    d = CheckDir(out)
    differs = {("baseline", 2): ({0}, 4), ("candidate", 1): (set(range(9)), 2), ("candidate", 2): (set(range(9)), 1)}
    for arm in ("baseline", "candidate"):
        for rep in (1, 2):
            items, at = differs.get((arm, rep), (set(), 0))
            lines = [
                OutputRecord(seq=i, item=i, token_ids=_diverged(i, at) if i in items else _reference(i)).model_dump_json()
                for i in range(N)
            ]
            (d.run_dir(arm, rep, KEY) / RunDir.OUTPUTS).write_text("\n".join(lines) + "\n")


def _gpu(t: float, util: float, mem: float, clock: float, power: float) -> GpuSample:
    reading = GpuReading(
        gpu="0",
        name="NVIDIA H200",
        utilization_pct=util,
        memory_used_mib=mem,
        memory_total_mib=80_000,
        sm_clock_mhz=clock,
        power_w=power,
    )
    return GpuSample(t_s=t, phase="during", source="nvml", ok=True, gpus=[reading])


NVML_MISSING = "NVML not available: NVML Shared Library Not Found"


def add_gpu_samples(out: Path) -> None:
    """The baseline's GPU read four times (and once failed), the candidate's never: NVML missing on its host."""
    d = CheckDir(out)
    base = [
        _gpu(1.0, 40, 1000, 1500, 100),
        _gpu(2.0, 50, 2000, 1600, 200),
        GpuSample(t_s=2.5, phase="during", source="nvml", ok=False, error="TimeoutError: timed out"),
        _gpu(3.0, 60, 3000, 1700, 300),
        _gpu(4.0, 90, 4000, 1800, 400),
    ]
    cand = [GpuSample(t_s=1.0, phase="during", source="nvml", ok=False, error=NVML_MISSING)]
    for arm, samples in (("baseline", base), ("candidate", cand)):
        path = d.run_dir(arm, 1, KEY) / RunDir.GPU_METRICS
        path.write_text("".join(s.model_dump_json() + "\n" for s in samples))


def _with_equivalence(record: CheckRecord, guardrail: bool, budget: float) -> CheckRecord:
    plan = record.plan.model_copy(update={"equivalence": Equivalence(guardrail=guardrail, max_extra_divergence=budget)})
    return record.model_copy(update={"plan": plan})


def _check(tmp_path: Path, guardrail: bool = False, budget: float = 0.05) -> tuple[CheckRecord, Path, ReportData]:
    record, out = make_check(tmp_path / "c")
    add_outputs(out)
    add_gpu_samples(out)
    record = _with_equivalence(record, guardrail, budget)
    return record, out, build_report_data(record, out)


# 18/120 - 1/60 = +13.3 %; Newcombe's 95 % interval of it (from the Wilson intervals 9.7-22.5 % and 0.3-8.9 %,
# worked by hand), as the warning rule and the guardrail compute it
DIFFERENCE = "+13.3 % (95 % CI +4.4 % to +20.9 %)"
MD_ROW = f"| {CELL} (target) | 60 | 18 of 120 (15.0 %) | 1 of 60 (1.7 %) | {DIFFERENCE} | 1.5 / 1 (tokens) | 4.0 / 4 (tokens) |"
# p95 by numpy's linear rule over the 4 readings: 60 + 0.85 x 30 = 85.5 %, and likewise for the others
GPU_ROW = (
    "| baseline | 0 (NVIDIA H200) | 4 | 60.0 / 85.5 / 90.0 | 2500 / 3850 / 4000 of 80000 | 1650 / 1785 / 1800 "
    "| 250.0 / 385.0 / 400.0 |"
)
GPU_GAPS = "baseline: 1 of 5 GPU samples failed (TimeoutError: timed out): the figures are of the rest"


def test_the_greedy_table_quotes_the_comparison_in_markdown_html_and_the_terminal(tmp_path):
    record, out, data = _check(tmp_path)
    v = data.verdict
    assert v.equivalence is not None
    (row,) = v.equivalence.rows
    assert (row.candidate.differing, row.candidate.compared, row.baseline.differing, row.baseline.compared) == (18, 120, 1, 60)
    assert row.warned and row.guardrail == "off"
    assert any("greedy outputs diverge more on the candidate" in w for w in v.warnings)  # the warning the row reports
    md = render_markdown(data)
    assert MD_ROW + " warning |" in md
    assert "Greedy outputs are not a guardrail here (equivalence.guardrail: false)" in md
    assert "greedy outputs table" in v.definitions and "- **greedy outputs table**:" in md
    html = render_html(data)
    cells = [CELL + " (target)", "18 of 120 (15.0 %)", "1 of 60 (1.7 %)", DIFFERENCE, "1.5 / 1 (tokens)", "4.0 / 4 (tokens)"]
    assert all(f'<td class="l">{c}</td>' in html for c in cells) and '<table id="greedy-outputs">' in html
    term = render_terminal(v, "report.html")
    assert (
        "  greedy outputs (1 cell): candidate differs in 18 of 120 (15.0 %), the baseline from itself in 1 of 60 (1.7 %); "
        "warning at 1 cell\n" in term
    )
    # the table is also in verdict.json, and report.md is exactly what the renderer returned
    write_outputs(record, out)
    assert CheckDir(out).report_md.read_text() == md


def test_a_failed_and_a_straddling_guardrail_are_named_in_the_table_and_the_terminal(tmp_path):
    *_, failed = _check(tmp_path / "tight", guardrail=True, budget=0.01)
    assert failed.verdict.verdict == "NO-GO"
    assert any(r.code == "output_diverged" and r.level == "steady" for r in failed.verdict.reason_details)  # level scope
    md = render_markdown(failed)
    assert MD_ROW + " warning; guardrail failed (NO-GO) |" in md
    assert "may exceed the baseline's own by at most 1.0 % (equivalence.max_extra_divergence)" in md
    assert '<td class="l">warning; guardrail failed (NO-GO)</td>' in render_html(failed)
    assert "; warning at 1 cell; guardrail failed (NO-GO) at 1 cell\n" in render_terminal(failed.verdict, "r")

    *_, straddling = _check(tmp_path / "loose", guardrail=True, budget=0.05)  # +4.4 % < 5 % < +20.9 %
    assert MD_ROW + " warning; guardrail straddles its budget (INCONCLUSIVE) |" in render_markdown(straddling)
    assert "guardrail straddles its budget (INCONCLUSIVE) at 1 cell" in render_terminal(straddling.verdict, "r")


def test_without_outputs_or_without_greedy_sampling_the_table_is_one_line(tmp_path):
    record, out = make_check(tmp_path / "c")  # a greedy cell, but its runs kept no outputs
    data = build_report_data(record, out)
    assert data.verdict.equivalence is not None and data.verdict.equivalence.absent == NO_OUTPUTS
    md = render_markdown(data)
    assert f"Not compared: {NO_OUTPUTS}.\n" in md and "| candidate differing |" not in md
    assert f"Not compared: {NO_OUTPUTS}." in render_html(data)
    assert f"  greedy outputs not compared: {NO_OUTPUTS}\n" in render_terminal(data.verdict, "r")

    table = equivalence_table(data.verdict.cells, [], greedy_sampling=set(), guardrail=False, budget=0.05)
    assert table.absent == NO_GREEDY and table.rows == []
    assert equivalence_lines(table)[-1] == f"Not compared: {NO_GREEDY}."
    assert equivalence_line(table) is None  # the terminal says nothing of a comparison the plan never asked for


def test_an_arm_with_nothing_compared_is_an_unverified_guardrail(tmp_path):
    *_, data = _check(tmp_path)
    cell = data.verdict.cells[0]
    assert cell.equivalence is not None
    one_rep = cell.equivalence.model_copy(update={"baseline": cell.equivalence.baseline.model_copy(update={"compared": 0})})
    one_rep = one_rep.model_copy(update={"baseline": one_rep.baseline.model_copy(update={"differing": 0, "share": None})})
    table = equivalence_table([cell.model_copy(update={"equivalence": one_rep})], [], {"greedy"}, guardrail=True, budget=0.05)
    (row,) = table.rows
    assert row.guardrail == "unverified" and row.difference is None and row.difference_ci is None
    md = "\n".join(equivalence_lines(table))
    assert "| none compared | - |" in md and "guardrail unverified |" in md


def test_report_md_and_html_give_each_arms_gpu_figures_or_why_not(tmp_path):
    *_, data = _check(tmp_path)
    md = render_markdown(data)
    assert "## GPUs (target level 'steady', first repetition)" in md
    assert GPU_ROW in md
    assert f"- candidate: not available: {NVML_MISSING}" in md and f"- {GPU_GAPS}" in md
    assert "- **GPU figures**:" in md and "GPU figures" in data.verdict.definitions
    html = render_html(data)
    for cell in ("4", "60.0 / 85.5 / 90.0", "2500 / 3850 / 4000 of 80000", "1650 / 1785 / 1800", "250.0 / 385.0 / 400.0"):
        assert f"<td>{cell}</td>" in html
    assert f"<li>candidate: not available: {NVML_MISSING}</li>" in html and f"<li>{GPU_GAPS}</li>" in html


def test_a_check_whose_runs_sampled_no_gpu_says_so(tmp_path):
    record, out = make_check(tmp_path / "c")
    data = build_report_data(record, out)
    assert data.charts.gpu == []
    assert f"Not sampled: {NOT_SAMPLED}." in render_markdown(data) and f"Not sampled: {NOT_SAMPLED}." in render_html(data)


def test_the_bench_table_shows_power_and_sm_clock_when_a_run_has_gpu_figures(tmp_path):
    _, out = make_check(tmp_path / "c")
    add_gpu_samples(out)
    run = CheckDir(out).run_dir("baseline", 1, KEY)
    without = load_summary(run)  # make_check's summaries were written without GPU samples
    with_gpu = without.model_copy(update={"gpu": gpu_usage(load_gpu_samples(run))})
    console = Console(width=200, record=True)
    console.print(summary_table({"with": with_gpu, "without": without}))
    text = console.export_text()
    assert "GPU power mean/max W" in text and "0: 250/400" in text
    assert "GPU SM clock mean/max MHz" in text and "0: 1650/1800" in text
    plain = Console(width=200, record=True)
    plain.print(summary_table({"without": without}))
    assert "GPU power" not in plain.export_text()
