"""A check's baseline taken from runs that exist (``check --baseline-run``): only the candidate is measured.

An operator often holds the baseline already: a ``specguard bench`` run directory, a ``vllm bench serve
--save-result --save-detailed`` file or a GuideLLM ``benchmarks.json`` (``FILE#N``: its N-th benchmark), read
by ``results.foreign`` with their definitions mapped onto specguard's. Each cell of the plan (traffic level x
sampling setting x prompt source, named as its run directories are, ``TRAFFIC__SAMPLING__pI``) takes one run:
``--baseline-run CELL=RUN``, repeatable, or a bare ``--baseline-run RUN`` when the plan has a single cell.
Every cell needs one: a check's baseline is imported whole or measured whole, never half of each.

Checked before anything is sent or written (exit 2, naming the cell, the run and what differs): the run reads,
it has successful requests, and its workload is the cell's wherever the run records it. A specguard run: the
prompts by content (the file's hash, or a synthetic set's generator) and count, the API, the load shape (kind,
rate, burstiness, concurrency, burst, requests, duration; not its seed or warm-up, which a check varies per
repetition anyway), the sampling values sent (temperature, top_p, max_tokens, ignore_eos) and the extra body.
A foreign file records no prompt text, no sampling and no segments: its load shape and API are checked, no
request may have produced more tokens than the plan's ``max_tokens``, a prompt source of several segments is
refused (the file's requests cannot be split by segment), and what is not verified is a warning in the verdict.
Its prompts are matched as ``compare`` matches them, by prompt token counts, which exist for the plan's prompts
only once the candidate has sent them: ``late_checks`` does it then, and a mismatch leaves the cell without a
comparison (INCONCLUSIVE, the reason naming the file). Refused as well is what the decision needs and the run
cannot give: the objective ``output_tokens_per_s`` (its samples are repetitions, and the baseline is one run),
per-token ITL from a file without chunk times, goodput from a file without send times, the greedy-output
guardrail without the baseline's outputs; and a sweep plan, which chooses its rates from the baseline as it runs.

The run is written into the check directory as the baseline's repetition 1 of its cell (a specguard run copied,
a foreign one converted and summarised), so the verdict and ``specguard report`` read it as any other run. One
repetition: the baseline's intervals are the request-level bootstrap's alone, never widened for a spread
between repetitions (that needs three per arm); the verdict says so, with each import's file and format.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specguard.analysis.compare import prompt_token_difference
from specguard.analysis.summarize import summarize
from specguard.check.baseline_match import match_cell
from specguard.check.plan import CheckPlan, plan_cells
from specguard.check.record import ArmInventory, CheckRecord
from specguard.errors import OptionError, UsageError
from specguard.loadgen.prompts import PromptSet
from specguard.results.check_dir import CheckDir
from specguard.results.foreign.load import load_any_run, split_selector
from specguard.results.foreign.run import ImportedBaseline, LoadedRun
from specguard.results.models import WarningNote
from specguard.results.run_dir import RunDir, load_run

__all__ = [
    "BASELINE_REPETITION",
    "Baseline",
    "LateChecks",
    "baseline_inventory",
    "baseline_warnings",
    "cells_of_arguments",
    "late_checks",
    "resolve_baselines",
    "write_baselines",
]

BASELINE_REPETITION = 1
FLAG = "--baseline-run"


@dataclass(frozen=True)
class Baseline:
    """One cell's imported run, its records mapped onto the cell, and what the check records of it."""

    run: LoadedRun
    record: ImportedBaseline


def cells_of_arguments(plan: CheckPlan, args: Sequence[str]) -> dict[str, str]:
    """Each cell key -> the run given for it (``CELL=RUN``, or a bare ``RUN`` for a plan of one cell); all cells."""
    cells = [c.key for c in plan_cells(plan)]
    shown = ", ".join(cells)
    given: dict[str, str] = {}
    for arg in args:
        name, sep, run = arg.partition("=")
        if sep and name in cells:
            key = name
        elif sep and not split_selector(arg)[0].exists():
            raise OptionError(f"{FLAG} {arg}: no cell '{name}' in the plan; its cells: {shown}")
        elif len(cells) == 1:
            key, run = cells[0], arg
        else:
            raise OptionError(
                f"{FLAG} {arg}: the plan has {len(cells)} cells; name the cell of each run as CELL=RUN (cells: {shown})"
            )
        if not run:
            raise OptionError(f"{FLAG} {arg}: no run after '='; expected CELL=RUN")
        if key in given:
            raise OptionError(f"{FLAG}: two runs for cell {key} ({given[key]} and {run}); give one per cell")
        given[key] = run
    missing = [c for c in cells if c not in given]
    if missing:
        raise OptionError(
            f"{FLAG}: {len(missing)} of the plan's {len(cells)} cells have no baseline run: {', '.join(missing)}; "
            "give one per cell (CELL=RUN), or leave the flag out to measure the baseline"
        )
    return given


def resolve_baselines(plan: CheckPlan, prompt_sets: Sequence[PromptSet], args: Sequence[str]) -> dict[str, Baseline]:
    """Every cell's run, read and matched with its cell; raise (exit 2) before anything is sent or written."""
    if not args:
        return {}
    if plan.sweep is not None:
        raise OptionError(
            f"{FLAG}: a sweep plan chooses its rates from the baseline while it runs, which an imported baseline "
            "cannot do; list the traffic levels the runs were made at instead"
        )
    if plan.objective.metric == "output_tokens_per_s":
        raise OptionError(
            f"{FLAG}: the objective output_tokens_per_s has one value per run (its samples are the repetitions), and "
            "an imported baseline is one run, so it has no interval; choose a per-request objective (tpot_ms, itl_ms, "
            "e2e_ms, ttft_ms or goodput)"
        )
    cells = {c.key: c for c in plan_cells(plan)}
    found: dict[str, Baseline] = {}
    problems: list[str] = []
    for key, arg in cells_of_arguments(plan, args).items():
        cell = cells[key]
        run = load_any_run(arg)  # a missing or malformed file is refused here, by name
        diffs, warns, run = match_cell(plan, prompt_sets[cell.source], cell, run)
        if diffs:
            problems.append(f"cell {key}, run {arg}: " + "; ".join(diffs))
            continue
        record = ImportedBaseline(
            cell=key,
            source=_absolute(arg),
            format=run.format,
            sha256=_sha256(run),
            requests=len(run.records),
            warnings=[*run.warnings, *warns],
        )
        found[key] = Baseline(run=run, record=record)
    if problems:
        raise UsageError(
            f"{FLAG}: not the workload of the cell, on which the candidate is measured: " + " | ".join(problems),
            {"differences": problems},
        )
    return found


def _absolute(arg: str) -> str:
    path, index = split_selector(arg)
    return str(path.resolve()) + (f"#{index}" if index is not None else "")


def _sha256(run: LoadedRun) -> str:
    """The content imported: a file's bytes, or a run directory's run.json and requests.jsonl."""
    path, index = split_selector(run.name)
    files = list(RunDir(path).content) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    if index is not None:  # one benchmark of several: which one is part of what was imported
        h.update(f"#{index}".encode())
    return h.hexdigest()


def write_baselines(d: CheckDir, baselines: dict[str, Baseline]) -> None:
    """Each imported run as the baseline's repetition 1 of its cell; one written before (a resumed check) is kept."""
    for key, b in baselines.items():
        target = d.run_dir("baseline", BASELINE_REPETITION, key)
        if RunDir(target).has_summary():
            continue
        staging = target.with_name(target.name + ".importing")
        if staging.exists():
            shutil.rmtree(staging)  # an import cut short: ours, never reused
        if b.run.format == "specguard":
            shutil.copytree(split_selector(b.run.name)[0], staging)
        else:
            staging.mkdir(parents=True)
            run = RunDir(staging)
            run.write_run(b.run.info)
            run.write_records(b.run.records)
            run.write_summary(summarize(b.run.records, [], slo=None))
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)


def baseline_inventory(baselines: dict[str, Baseline]) -> ArmInventory:
    """The baseline arm as the imported runs describe it (no server was asked)."""
    first = next(iter(baselines.values())).run.info
    formats = ", ".join(sorted({b.run.format for b in baselines.values()}))
    return ArmInventory(arm="baseline", kind=f"imported ({formats})", model=first.model, vllm_version=first.server_version)


def baseline_warnings(record: CheckRecord) -> list[str]:
    """The verdict's warnings about the imported baseline: that it was imported, from where, and what it lacks."""
    out: list[str] = []
    for imp, note in zip(record.baseline_imports, baseline_notes(record), strict=True):
        out.append(note.text)
        out += [f"cell {imp.cell}: {w}" for w in imp.warnings]
    return out


def baseline_notes(record: CheckRecord) -> list[WarningNote]:
    """One warning per imported baseline, as data (kind ``baseline_imported``): its sentence is the first of each."""
    return [
        WarningNote(
            kind="baseline_imported",
            text=f"baseline of cell {imp.cell} imported from {imp.source} ({imp.format}), not measured by this check: one "
            "run, no repetitions of the baseline, so its intervals are the request-level bootstrap's alone, never "
            "widened for a spread between repetitions",
        )
        for imp in record.baseline_imports
    ]


@dataclass
class LateChecks:
    """What is known only once the candidate has run: cells whose imported prompts turned out others, and warnings."""

    mismatched: dict[str, tuple[str, str]]  # cell key -> (the cell's name as the verdict gives it, what differs)
    warnings: list[str]


def late_checks(record: CheckRecord, out: Path) -> LateChecks:
    """A foreign baseline's prompt token counts against the candidate's (as ``compare`` matches them); model names."""
    d = CheckDir(out)
    plan = record.measured_plan
    cells = {c.key: c for c in plan_cells(plan)}
    found = LateChecks(mismatched={}, warnings=[])
    for imp in record.baseline_imports:
        base = d.measured_runs("baseline", imp.cell, BASELINE_REPETITION)
        cand = [load_run(r) for r in d.measured_runs("candidate", imp.cell, plan.repetitions)]
        if not base or not cand or imp.cell not in cells:
            continue  # a cell without both arms: the verdict names it
        base_info, base_records, _ = load_run(base[0])
        models = sorted({info.model for info, _, _ in cand})
        if base_info.model not in models and base_info.model != "unknown":
            served = f"the imported baseline served model {base_info.model!r}, the candidate {', '.join(map(repr, models))}"
            found.warnings.append(f"cell {imp.cell}: {served}")
        if imp.format == "specguard":
            continue  # matched by content before the check ran
        cand_records = [r for _, records, _ in cand for r in records]
        diff, warn = prompt_token_difference(base_records, cand_records)
        if warn:
            found.warnings.append(f"cell {imp.cell}: {warn}")
        if diff:
            c = cells[imp.cell]
            segments = ", ".join(sorted({r.segment for r in cand_records}))
            detail = f"{diff}: the imported baseline ({imp.source}) and the candidate did not send the same prompts"
            found.mismatched[imp.cell] = (f"{c.traffic.name} / {c.sampling.name} / {segments}", detail)
    return found
