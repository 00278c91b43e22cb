"""A check's results on disk: check.json (what ran), verdict.json, report.md and a self-contained report.html.

``specguard report DIR`` rebuilds all three from check.json and the stored
runs, so the numbers in a report can always be recomputed.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from specguard import __version__
from specguard.analysis.request_metrics import DEFINITIONS
from specguard.check.aggregate import cell_comparisons
from specguard.check.plan import CheckPlan
from specguard.check.runner import ArmInventory, CheckRun
from specguard.check.verdict import CellComparison, Failure, Verdict, decide
from specguard.inventory.collect import lengths_from_runs
from specguard.inventory.diff import diff_inventories
from specguard.inventory.model import InventoryDiff
from specguard.results.models import RunInfo

CHECK_SCHEMA = "specguard.check/1"
VERDICT_SCHEMA = "specguard.verdict/1"
EXIT_CODES = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 3}


class CheckRecord(BaseModel):
    """check.json: everything needed to rebuild the verdict and the report from the stored runs."""

    schema_version: str = CHECK_SCHEMA
    tool_version: str = __version__
    plan_path: str
    plan: CheckPlan
    inventory: dict[str, ArmInventory]
    failures: list[Failure]


class VerdictFile(Verdict):
    schema_version: str = VERDICT_SCHEMA
    plan: str
    exit_code: int
    inventory: dict[str, ArmInventory]
    inventory_diff: InventoryDiff | None = None
    cells: list[CellComparison]
    commands: list[str]
    definitions: dict[str, str]


def save_check(run: CheckRun, plan_path: Path) -> CheckRecord:
    record = CheckRecord(plan_path=str(plan_path), plan=run.plan, inventory=run.inventory, failures=run.failures)
    (run.out / "check.json").write_text(record.model_dump_json(indent=2))
    return record


def load_check(out: Path) -> CheckRecord:
    return CheckRecord.model_validate_json((out / "check.json").read_text())


def commands(record: CheckRecord, out: Path) -> list[str]:
    cmds = [f"specguard check {record.plan_path} --out {out}", f"specguard report {out}"]
    for inv in record.inventory.values():
        if inv.command:
            cmds.append(f"# {inv.arm} server, as launched: " + " ".join(inv.command))
    return cmds


_HARDWARE_KEYS = ("num_gpu_blocks", "block_size", "gpu_memory_utilization", "kv_cache_memory_bytes", "cache_dtype")


def observed_inventory(record: CheckRecord, out: Path) -> dict[str, ArmInventory]:
    """The inventory as the servers reported it: version from /version, cache layout from cache_config_info."""
    inventory = {}
    for arm, inv in record.inventory.items():
        runs = sorted((out / "runs" / arm).glob("rep*/*/run.json"))
        if runs:
            info = RunInfo.model_validate_json(runs[0].read_text())
            cache = info.cache_config or {}
            update: dict[str, object] = {
                "vllm_version": info.server_version,
                "hardware": {k: cache[k] for k in _HARDWARE_KEYS if k in cache},
            }
            if inv.pinned is not None:
                prompt, output = lengths_from_runs([p.parent for p in runs])
                update["pinned"] = inv.pinned.model_copy(update={"mean_prompt_tokens": prompt,
                                                                 "mean_output_tokens": output})
            inv = inv.model_copy(update=update)
        inventory[arm] = inv
    return inventory


def build_verdict(record: CheckRecord, out: Path) -> VerdictFile:
    plan = record.plan
    cells = cell_comparisons(plan, out)
    verdict = decide(cells, plan.objective, plan.guardrails, record.failures)
    if not cells and verdict.verdict == "GO":
        verdict = verdict.model_copy(update={"verdict": "INCONCLUSIVE", "reasons": ["no cell was measured on both arms"]})
    defs = dict(DEFINITIONS)
    defs["ratio"] = "candidate / baseline; below 1 is faster for latencies (above 1 is better for tokens/s)"
    defs["95% CI"] = "percentile bootstrap, requests resampled within repetitions (per-token ITL by request)"
    inventory = observed_inventory(record, out)
    pinned = [inventory[a].pinned for a in ("baseline", "candidate") if a in inventory]
    inv_diff = diff_inventories(pinned[0], pinned[1]) if len(pinned) == 2 and all(pinned) else None  # type: ignore[arg-type]
    if inv_diff is not None:
        verdict = verdict.model_copy(update={"warnings": verdict.warnings + inv_diff.warnings})
    return VerdictFile(
        **verdict.model_dump(), plan=plan.name, exit_code=EXIT_CODES[verdict.verdict],
        inventory=inventory, inventory_diff=inv_diff,
        cells=cells, commands=commands(record, out), definitions=defs,
    )


def write_outputs(record: CheckRecord, out: Path) -> VerdictFile:
    from specguard.report.html import render_html
    from specguard.report.markdown import render_markdown

    v = build_verdict(record, out)
    (out / "verdict.json").write_text(v.model_dump_json(indent=2))
    (out / "report.md").write_text(render_markdown(v))
    (out / "report.html").write_text(render_html(v, record, out))
    return v

