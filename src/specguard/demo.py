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
from specguard.check.plan import load_plan
from specguard.check.report import VerdictFile, write_outputs
from specguard.check.requirements import plan_warnings
from specguard.check.runner import run_check
from specguard.loadgen.runner import MatrixProgress
from specguard.simulated import SIMULATED_SERVER_BANNER

PLANS = Path(__file__).parent / "check" / "plans"
DEMO_PLAN = PLANS / "demo.yaml"
SIMULATED_DEMO_PLAN = PLANS / "demo-simulated.yaml"

SIZED_TO_SHOW = (
    "this demo plan is sized to show the tool in minutes on a laptop, not to reach GO: its cells hold too few "
    "requests for a P99 guardrail to pass, so it cannot say GO: expect INCONCLUSIVE, or NO-GO where a regression "
    "already shows at P90 or P50; size a real check with 'specguard check PLAN --dry-run'"
)
SIMULATED_DEMO = (
    f"{SIMULATED_SERVER_BANNER}. This demo runs Llama-3-70B on 4 x H100 as specguard's engine model predicts it, baseline "
    "vs draft-model speculation at QPS 1 to past the crossover, to show where speculation helps and where it hurts; "
    "its cells are too small for a P99 to pass, not for P90 to show a regression: expect NO-GO, speculation hurts at QPS 32 "
    "(and its TTFT already at QPS 16). Measure your own servers with 'specguard check'"
)


def demo_notes(simulated: bool = False) -> list[str]:
    """What the demo says before it measures: that it cannot reach GO by construction, and why (and, simulated, that)."""
    plan = SIMULATED_DEMO_PLAN if simulated else DEMO_PLAN
    return [SIMULATED_DEMO if simulated else SIZED_TO_SHOW, *(f"warning: {w}" for w in plan_warnings(load_plan(plan)))]


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
