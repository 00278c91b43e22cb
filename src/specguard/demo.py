"""The main job on the embedded default: a complete, small check plan, baseline vs n-gram speculation.

It installs the vLLM CPU runtime and the local models if missing, runs the
packaged plan (idle, steady and burst; temperature 0 and 1; an extraction
segment with heavy prompt overlap and an open-ended chat segment), writes
verdict.json, report.md and report.html, and prints the verdict. Whatever the
verdict is, it is the outcome of the measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specguard.check.plan import load_plan
from specguard.check.report import VerdictFile, write_outputs
from specguard.check.requirements import plan_warnings
from specguard.check.runner import run_check
from specguard.embedded.launch import embedded_launcher
from specguard.loadgen.runner import MatrixProgress

DEMO_PLAN = Path(__file__).parent / "check" / "plans" / "demo.yaml"

SIZED_TO_SHOW = (
    "this demo plan is sized to show the tool in minutes on a laptop, not to reach GO: its cells hold too few "
    "requests for P99 guardrails, so expect INCONCLUSIVE; size a real check with 'specguard check PLAN --dry-run'"
)


def demo_notes() -> list[str]:
    """What the demo says before it measures: that it cannot reach GO by construction, and why."""
    return [SIZED_TO_SHOW, *(f"warning: {w}" for w in plan_warnings(load_plan(DEMO_PLAN)))]


def run_demo(out: Path, log: Callable[[str], None] = print, progress: MatrixProgress | None = None) -> VerdictFile:
    plan = load_plan(DEMO_PLAN)
    for note in demo_notes():
        log(note)
    record = run_check(plan, DEMO_PLAN, out, launcher=embedded_launcher, log=log, progress=progress)
    return write_outputs(record, out)
