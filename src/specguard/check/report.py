"""A check's results on disk: check.json (what ran), verdict.json, report.md and a self-contained report.html.

``specguard report DIR`` rebuilds all three from check.json and the stored
runs, so the numbers in a report can always be recomputed. ``build_report_data``
is the one place that gathers a report's data (with ``aggregate`` and
``series``, the only readers of run directories); the renderers under
``specguard.report`` are pure functions of what it returns.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from specguard.analysis.definitions import HIGHER_IS_BETTER, METRIC_DEFINITIONS, check_definitions
from specguard.check.aggregate import comparisons, one_arm_cells
from specguard.check.baseline import BASELINE_REPETITION, baseline_notes, baseline_warnings, late_checks
from specguard.check.outputs import forget_outputs
from specguard.check.record import ArmInventory, CheckRecord, CheckState, block_name
from specguard.check.series import charts
from specguard.errors import InputFileError, OutputExistsError, UsageError
from specguard.inventory.collect import lengths_from_runs
from specguard.inventory.diff import diff_inventories
from specguard.loadgen.run_summary import load_or_recompute_summary
from specguard.report.build.forest import REPORT_DEFINITIONS, forest
from specguard.report.build.greedy_table import EQUIVALENCE_DEFINITIONS, equivalence_table
from specguard.report.build.warning_groups import group_warnings
from specguard.report.model.data import VERDICT_SCHEMA, ReportData, VerdictFile
from specguard.report.model.partial import PartialReport, PartialRun
from specguard.report.render.gpu_table import GPU_DEFINITIONS
from specguard.report.render.outputs import PARTIAL_OUTPUTS, REPORT_OUTPUTS
from specguard.results.check_dir import ARMS, CheckDir, cell_key
from specguard.results.run_dir import RunDir
from specguard.results.store import read_json
from specguard.simulated import is_simulated_version
from specguard.verdict import decide
from specguard.verdict.load_range import crossover_lines
from specguard.verdict.model import SINGLE_LOOK, Look, LookRecord
from specguard.verdict.reason_groups import group_reasons

__all__ = ["VERDICT_SCHEMA", "VerdictFile", "build_report_data", "build_verdict", "load_check", "write_outputs"]

EXIT_CODES = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 3}


def load_check(out: Path) -> CheckRecord:
    """check.json of a check directory, or a one-line reason why ``out`` is not one."""
    d = CheckDir(out)
    if not out.exists():
        raise InputFileError(f"{out}: check directory not found")
    if not out.is_dir():
        raise InputFileError(f"{out}: not a directory; expected one written by 'specguard check'")
    if not d.check_json.exists():
        raise InputFileError(f"{out}: no check.json (not a check directory)")
    return read_json(d.check_json, CheckRecord)


def missing_runs(record: CheckRecord, out: Path) -> list[str]:
    """What an incomplete check lacks: blocks not done (per its state) and runs without a summary."""
    d = CheckDir(out)
    missing: list[str] = []
    if d.state_json.exists():
        missing += [f"block {b}" for b in read_json(d.state_json, CheckState).missing]
    plan = record.measured_plan
    stage_of = {lv.name: st.name for st in record.sweep.stages for lv in st.levels} if record.sweep else {}
    for rep in range(1, record.plan.repetitions + 1):  # a sequential check's further blocks: in the state above
        # an imported baseline is one run per cell, repetition 1 (check/baseline.py)
        arms = ("candidate",) if record.baseline_imports and rep > BASELINE_REPETITION else ARMS
        for arm in arms:
            for t in plan.levels:
                if f"block {block_name(rep, arm, stage_of.get(t.name))}" in missing:
                    continue
                for smp in plan.sampling:
                    for i in range(len(plan.prompts)):
                        key = cell_key(t.name, smp.name, i)
                        if not d.has_summary(arm, rep, key):
                            missing.append(f"run {arm}/rep{rep}/{key}")
    return missing


def commands(record: CheckRecord, out: Path) -> list[str]:
    given = "".join(f" --baseline-run {shlex.quote(f'{b.cell}={b.source}')}" for b in record.baseline_imports)
    cmds = [f"specguard check {record.plan_path}{given} --out {out}", f"specguard report {out}"]
    for inv in record.inventory.values():
        if inv.command:
            cmds.append(f"# {inv.arm} server, as launched: " + " ".join(inv.command))
    return cmds


_HARDWARE_KEYS = ("num_gpu_blocks", "block_size", "gpu_memory_utilization", "kv_cache_memory_bytes", "cache_dtype")


def observed_inventory(record: CheckRecord, out: Path) -> dict[str, ArmInventory]:
    """The inventory as the servers reported it: version from /version, cache layout from cache_config_info."""
    inventory = {}
    for arm, inv in record.inventory.items():
        runs = CheckDir(out).arm_runs(arm)
        if runs:
            info = RunDir(runs[0]).info()
            cache = info.cache_config or {}
            update: dict[str, object] = {
                "vllm_version": info.server_version,
                "hardware": {k: cache[k] for k in _HARDWARE_KEYS if k in cache},
            }
            if inv.pinned is not None:
                prompt, output = lengths_from_runs(runs)
                update["pinned"] = inv.pinned.model_copy(update={"mean_prompt_tokens": prompt, "mean_output_tokens": output})
            inv = inv.model_copy(update=update)
        inventory[arm] = inv
    return inventory


def build_verdict(
    record: CheckRecord, out: Path, look: Look | None = None, looks: Sequence[LookRecord] | None = None
) -> VerdictFile:
    """verdict.json of a complete check, decided from its stored runs.

    ``look``: a sequential check's look, whose share of the error the verdict is decided at (``check
    --until-decided``); ``looks``: the looks taken, recorded in verdict.json as they were. By default both
    come from the record: a sequential check is decided again at its last look, a fixed one at its one look.
    """
    looks = list(record.looks if looks is None else looks)
    if look is None:
        look = looks[-1].look if looks else SINGLE_LOOK
    plan = record.measured_plan
    late = late_checks(record, out)
    cells, levels = comparisons(plan, out, skip=late.mismatched)
    verdict = decide(
        cells,
        plan.objective,
        plan.guardrails,
        record.failures,
        one_arm_cells(plan, out),
        plan.equivalence,
        baseline_mismatches=list(late.mismatched.values()),
        levels=levels,
        look=look,
    )
    inventory = observed_inventory(record, out)
    base, cand = (inventory[a].pinned if a in inventory else None for a in ARMS)
    inv_diff = diff_inventories(base, cand) if base is not None and cand is not None else None
    warnings = baseline_warnings(record) + late.warnings + verdict.warnings + (inv_diff.warnings if inv_diff is not None else [])
    notes = baseline_notes(record) + verdict.warning_notes
    runs = sum(len(CheckDir(out).arm_runs(arm)) for arm in ARMS)
    eq = plan.equivalence
    greedy = {s.name for s in plan.sampling if s.temperature == 0}
    rate_levels = {t.name for t in plan.levels if t.rate is not None}
    return VerdictFile(
        **verdict.model_dump(exclude={"reasons", "warnings", "warning_notes", "crossover"}),
        crossover=crossover_lines(cells, plan.objective.metric in HIGHER_IS_BETTER, rate_levels),  # once per group
        simulated=any(is_simulated_version(inv.vllm_version) for inv in inventory.values()),
        reasons=verdict.reason_texts,
        reason_details=verdict.reasons,
        reason_groups=group_reasons(verdict.reasons),
        warnings=warnings,
        warning_notes=notes,
        warning_groups=group_warnings(warnings, notes, runs=runs, cells=len(cells)),
        plan=plan.name,
        exit_code=EXIT_CODES[verdict.verdict],
        inventory=inventory,
        inventory_diff=inv_diff,
        cells=cells,
        commands=commands(record, out),
        definitions=check_definitions() | REPORT_DEFINITIONS | EQUIVALENCE_DEFINITIONS | GPU_DEFINITIONS,
        labels=record.plan.labels,
        equivalence=equivalence_table(cells, verdict.reasons, greedy, eq.guardrail, eq.max_extra_divergence),
        baseline_imports=record.baseline_imports,
        looks=looks,
    )


def build_report_data(record: CheckRecord, out: Path) -> ReportData:
    """Everything the report shows: the verdict and the chart series, gathered once from the stored runs."""
    v = build_verdict(record, out)
    plan = record.measured_plan
    g = plan.guardrails
    evidence = forest(
        v.cells,
        v.objective,
        plan.objective.metric in HIGHER_IS_BETTER,
        plan.objective.min_improvement,
        {"P99 E2E": g.max_p99_e2e_regression, "P99 TTFT": g.max_p99_ttft_regression},
        v.reason_details,
    )
    drawn = charts(plan, out, v.cells).model_copy(update={"forest": evidence})
    return ReportData(verdict=v, charts=drawn, out=str(out))


def _refuse_existing(paths: Sequence[Path], force: bool) -> None:
    existing = [p.name for p in paths if p.exists()]
    if existing and not force:
        raise OutputExistsError(f"{paths[0].parent}: {', '.join(existing)} already exist; pass --force to rebuild them")


def write_outputs(record: CheckRecord, out: Path, force: bool = False) -> VerdictFile:
    """verdict.json, report.md, report.html and cells.csv of a complete check; existing ones are replaced only with ``force``."""
    missing = missing_runs(record, out)
    if missing:
        raise UsageError(
            f"{out}: the check is incomplete ({len(missing)} missing: {', '.join(missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''}); continue it with 'specguard check "
            f"{record.plan_path} --out {out} --resume', or render it with 'specguard report {out} --partial'"
        )
    _refuse_existing(REPORT_OUTPUTS.paths(out), force)
    data = build_report_data(record, out)
    REPORT_OUTPUTS.write(data, out)  # verdict.json, report.md, report.html, cells.csv: every registered format
    forget_outputs(record.measured_plan, out)  # the comparison is stored; the outputs themselves go unless kept
    return data.verdict


def partial_report(record: CheckRecord, out: Path) -> PartialReport:
    runs = []
    simulated = False
    for arm in ARMS:
        for run_dir in CheckDir(out).arm_runs(arm):
            summary = load_or_recompute_summary(run_dir)
            runs.append(PartialRun(arm=arm, repetition=run_dir.parent.name, cell=run_dir.name, summary=summary))
            if RunDir(run_dir).is_run():
                simulated = simulated or is_simulated_version(RunDir(run_dir).info().server_version)
    return PartialReport(
        plan=record.plan.name,
        plan_path=record.plan_path,
        out=str(out),
        missing=missing_runs(record, out),
        runs=runs,
        definitions=dict(METRIC_DEFINITIONS),
        simulated=simulated,
    )


def write_partial(record: CheckRecord, out: Path, force: bool = False) -> Path:
    """report-partial.md and report-partial.html: what an interrupted check has, labelled, with no verdict."""
    _refuse_existing(PARTIAL_OUTPUTS.paths(out), force)
    PARTIAL_OUTPUTS.write(partial_report(record, out), out)
    return PARTIAL_OUTPUTS["html"].path(out)
