"""--slo reaches the run's configuration (and so run.json and the summary); the terminal shows goodput."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specguard.analysis.summarize import summarize
from specguard.loadgen.request import BenchRequest, bench_config
from specguard.report.render.terminal import print_summaries
from specguard.results.models import Slo
from tests.unit.analysis.test_slo import record


def test_slo_option_reaches_the_bench_config(tmp_path: Path) -> None:
    request = BenchRequest(
        base_url="http://127.0.0.1:9",
        model="m",
        prompts="synthetic:random",
        out=tmp_path / "run",
        num_requests=1,
        slo="ttft_ms=500,itl_ms=40",
    )
    assert bench_config(request).slo == Slo(ttft_ms=500, itl_ms=40)
    assert bench_config(request.model_copy(update={"slo": None})).slo is None


def test_terminal_summary_shows_goodput_and_attainment() -> None:
    records = [record(sent_s=0.0), record(sent_s=1.0, ttft_ms=900.0)]
    console = Console(record=True, width=200)
    print_summaries(console, {"run": summarize(records, [], slo=Slo(ttft_ms=500))})
    text = console.export_text()
    assert "goodput (req/s)" in text and "50.0% of 2 (ttft_ms<=500)" in text
    console = Console(record=True, width=200)
    print_summaries(console, {"run": summarize(records, [])})
    assert "goodput" not in console.export_text()
