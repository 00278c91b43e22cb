"""The check report: data built once from a check directory of real run files, rendered by pure functions."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from specguard.analysis.definitions import CHECK_INTERVAL, CHECK_RATIO, METRIC_DEFINITIONS
from specguard.analysis.summarize import summarize
from specguard.check.plan import CheckPlan
from specguard.check.record import CheckRecord
from specguard.check.report import build_report_data, write_outputs
from specguard.number_format import fmt, fmt_percent, fmt_range
from specguard.report.render.html import render_html
from specguard.report.render.markdown import render_markdown
from specguard.report.render.verdict_terminal import render_terminal
from specguard.results.check_dir import ARMS, CheckDir, cell_key
from specguard.results.models import LoadShape, RequestRecord, RunInfo, SamplingOverrides
from specguard.results.run_dir import RunWriter

PLAN = {
    "name": "t",
    "arms": {
        "baseline": {"endpoint": {"base_url": "http://127.0.0.1:9", "model": "m"}},
        "candidate": {"endpoint": {"base_url": "http://127.0.0.1:9", "model": "m"}},
    },
    "repetitions": 2,
    "warmup": 0,
    "traffic": [{"name": "steady", "rate": 4, "num_requests": 60, "target": True}],
    "sampling": [{"name": "greedy", "temperature": 0.0}],
    "prompts": [{"source": "synthetic:random", "count": 60}],
    "statistics": {"resamples": 200},
}


def _records(rng: np.random.Generator, scale: float, n: int, send_lag_s: float = 0.0) -> list[RequestRecord]:
    out = []
    for i in range(n):
        ttft = 0.02 * rng.lognormal(0, 0.3)
        gaps = list(scale * 0.01 * rng.lognormal(0, 0.3, size=8))
        times = list(np.cumsum([ttft, *gaps]))
        out.append(
            RequestRecord(
                index=i,
                seq=i,
                request_id=f"r{i}",
                segment="default",
                ok=True,
                error=None,
                http_status=200,
                scheduled_s=i,
                sent_s=i,
                send_lag_s=send_lag_s,
                ttft_s=times[0],
                e2e_s=times[-1],
                stream_end_s=times[-1],
                chunk_times_s=times,
                chunk_tokens=[1] * len(times),
                token_source="server_usage",
                prompt_tokens=5,
                output_tokens=len(times),
                finish_reason="length",
            )
        )
    return out


def make_check(
    root: Path, min_improvement: float = 0.10, candidate_send_lag_s: tuple[float, float] = (0.0, 0.0)
) -> tuple[CheckRecord, Path]:
    """A complete check directory: both arms, two repetitions, one cell; the candidate ~20 % faster per token.

    ``candidate_send_lag_s``: each candidate repetition's send lag, every request (above 10 ms: a client warning).
    """
    plan = CheckPlan.model_validate({**PLAN, "objective": {"min_improvement": min_improvement}})
    record = CheckRecord(plan_path=str(root / "plan.yaml"), plan=plan, inventory={}, failures=[])
    d = CheckDir(root)
    root.mkdir(parents=True)
    d.check_json.write_text(record.model_dump_json())
    rng = np.random.default_rng(0)
    for arm in ARMS:
        for rep in (1, 2):
            w = RunWriter(d.run_dir(arm, rep, cell_key("steady", "greedy", 0)))
            w.write_run(
                RunInfo(
                    tool_version="0",
                    base_url="http://127.0.0.1:9",
                    api="completions",
                    model="m",
                    metrics_url=None,
                    prompt_source="synthetic:random",
                    prompt_count=60,
                    load=LoadShape(kind="concurrency", concurrency=1, num_requests=60),
                    sampling=SamplingOverrides(temperature=0.0),
                    started_unix=time.time(),
                    started_monotonic=0.0,
                    finished_unix=time.time(),
                )
            )
            lag = candidate_send_lag_s[rep - 1] if arm == "candidate" else 0.0
            records = _records(rng, 0.8 if arm == "candidate" else 1.0, 60, lag)
            w.write_summary(summarize(records, []))
            w.close()
            with (w.dir / "requests.jsonl").open("w") as f:
                f.writelines(r.model_dump_json() + "\n" for r in records)
    return record, root


def test_report_data_is_built_once_and_every_renderer_quotes_it(tmp_path):
    record, out = make_check(tmp_path / "c")
    data = build_report_data(record, out)
    v = data.verdict
    assert v.verdict in ("GO", "NO-GO", "INCONCLUSIVE") and len(v.cells) == 1
    assert v.reasons == [r.text for r in v.reason_details] and v.reason_details
    assert v.definitions["ratio"] == CHECK_RATIO and v.definitions["95% CI"] == CHECK_INTERVAL
    assert {k: v.definitions[k] for k in METRIC_DEFINITIONS} == METRIC_DEFINITIONS
    assert [s.arm for s in data.charts.load_series] == list(ARMS)
    assert [a.arm for a in data.charts.distributions] == list(ARMS) and data.charts.distributions[0].itl_ms
    md = render_markdown(data)
    assert f"**{v.verdict}**" in md and "## Reproduce" in md and CHECK_INTERVAL in md and "nan" not in md
    html = render_html(data)
    assert html.count("Plotly.newPlot") == 5 and CHECK_RATIO in html and v.verdict in html
    term = render_terminal(v, str(CheckDir(out).report_html))
    assert term.splitlines()[-1] == f"report: {out / 'report.html'}  (also report.md, verdict.json)"
    # the renderers read nothing: the same data renders the same text, and write_outputs writes exactly that
    written = write_outputs(record, out)
    assert written == v and CheckDir(out).report_md.read_text() == md


def test_min_improvement_sizes_the_more_requests_advice(tmp_path):
    """The objective's min_improvement is the change the sample-size advice sizes for: smaller needs more."""
    need = {}
    for m in (0.05, 0.30):
        record, out = make_check(tmp_path / f"m{m}", min_improvement=m)
        cell = build_report_data(record, out).verdict.cells[0]
        need[m] = cell.metrics["ttft_ms"]["p95"].more_requests_needed
    assert need[0.05] > need[0.30]


def test_one_number_format_with_one_nan_rule():
    assert fmt(1.23456) == "1.23" and fmt(1.23456, 3) == "1.235"
    assert fmt(None) == fmt(float("nan")) == "-"
    assert fmt_range(float("nan"), 2.0) == "--2.00" and fmt_percent(0.031) == "3.1 %" and fmt_percent(None) == "-"


REPORT = Path(__file__).resolve().parents[3] / "src" / "specguard" / "report"


@pytest.mark.parametrize("module", sorted(str(p.relative_to(REPORT)) for p in REPORT.rglob("*.py")))
def test_report_modules_import_nothing_from_check(module):
    """Renderers only render: no module under report/ imports the check package, which builds their data."""
    import ast

    tree = ast.parse((REPORT / module).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [n for n in names if n == "specguard.check" or n.startswith("specguard.check.")]


def test_cells_csv_holds_the_verdicts_cell_numbers_and_the_labels_reach_every_report(tmp_path):
    import csv
    import io

    record, out = make_check(tmp_path / "c")
    record = record.model_copy(update={"plan": record.plan.model_copy(update={"labels": {"team": "search", "gpu": "h100"}})})
    v = write_outputs(record, out)
    rows = list(csv.DictReader(io.StringIO(CheckDir(out).cells_csv.read_text())))
    (cell,) = v.cells
    assert len(rows) == 1 and rows[0]["traffic"] == cell.traffic and rows[0]["segment"] == cell.segment
    assert float(rows[0]["objective_ratio"]) == cell.objective.ratio
    assert float(rows[0]["p99_ttft_ci_high"]) == cell.p99_ttft.ci_high
    assert rows[0]["status"] == v.lines[0].status
    assert rows[0]["label:team"] == "search" and rows[0]["label:gpu"] == "h100"
    assert v.labels == {"team": "search", "gpu": "h100"}
    assert "`gpu=h100`, `team=search`" in CheckDir(out).report_md.read_text()
    assert "<code>team=search</code>" in CheckDir(out).report_html.read_text()
