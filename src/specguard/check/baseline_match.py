"""Whether an imported baseline run is its cell's workload (``check --baseline-run``; see check/baseline.py).

Differences refuse the run (exit 2, before anything is sent); warnings name what its format could not show.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specguard.analysis.compare import metric_values, prompt_difference
from specguard.check.plan import CheckPlan, PlanCell, SamplingSetting
from specguard.loadgen.prompts import PromptSet
from specguard.loadgen.runner import sampling_on_the_wire
from specguard.results.foreign.load import split_selector
from specguard.results.foreign.run import LoadedRun
from specguard.results.models import LoadShape, RunInfo, SamplingOverrides
from specguard.results.run_dir import RunDir

__all__ = ["match_cell"]

# The load as a run records it, without its seed and warm-up: a check gives every repetition its own seed.
_LOAD_KEYS = ("kind", "rate", "burstiness", "concurrency", "burst", "num_requests", "duration_s")


def match_cell(plan: CheckPlan, prompts: PromptSet, cell: PlanCell, run: LoadedRun) -> tuple[list[str], list[str], LoadedRun]:
    """(differences, warnings, the run as the cell reads it) between an imported run and its cell's workload."""
    warns: list[str] = []
    if run.format == "specguard":
        diffs = _specguard_differences(plan, prompts, cell, run)
    else:
        diffs, warns, run = _foreign_differences(plan, prompts, cell, run)
    diffs += _load_differences(run.info.load, cell.traffic.load_shape(plan.warmup, plan.seed))
    if run.info.api != plan.api:
        diffs.append(f"api: {run.info.api} in the run, {plan.api} in the plan")
    if not any(r.ok for r in run.records):
        diffs.append("no successful request in the run (nothing to compare)")
    decision, notes = _decision_needs(plan, cell, run)
    return diffs + decision, warns + notes, run


def _normal(shape: LoadShape) -> dict[str, object]:
    """The load's keys that a run of it records; idle (one request at a time) is a concurrency of 1."""
    if shape.kind == "idle":
        shape = shape.model_copy(update={"kind": "concurrency", "concurrency": 1})
    return shape.model_dump(include=set(_LOAD_KEYS))


def _load_differences(run: LoadShape, cell: LoadShape) -> list[str]:
    a, b = _normal(run), _normal(cell)
    return [f"load.{k}: {a[k]!r} in the run, {b[k]!r} in the cell" for k in _LOAD_KEYS if a[k] != b[k]]


def _content(generator: dict[str, str | int] | None) -> dict[str, str | int] | None:
    # A synthetic set's text does not depend on max_tokens, only each item's own default does, and the
    # values sent are compared on their own: a `bench` run (whose sets default to 64) matches a plan's 16.
    return {k: v for k, v in generator.items() if k != "max_tokens"} if generator is not None else None


def _specguard_differences(plan: CheckPlan, prompts: PromptSet, cell: PlanCell, run: LoadedRun) -> list[str]:
    info = run.info
    diffs = []
    prompt = prompt_difference(
        (info.prompt_source, info.prompt_sha256, _content(info.prompt_generator)),
        (prompts.source, prompts.sha256, _content(prompts.generator)),
    )
    if prompt is not None:
        diffs.append(f"{prompt} (the run's prompts, then the cell's)")
    if info.prompt_count != len(prompts.items):
        diffs.append(f"prompt_count: {info.prompt_count} in the run, {len(prompts.items)} in the cell")
    diffs += _sampling_differences(plan, prompts, cell.sampling, info)
    extra = plan.arms.baseline.extra_body or None
    if info.extra_body != extra:
        diffs.append(f"extra_body: {info.extra_body!r} in the run, {extra!r} in the plan's baseline arm")
    run_dir = split_selector(run.name)[0]
    if info.interrupted or not RunDir(run_dir).has_summary():
        diffs.append(f"the run did not finish (interrupted, or no {RunDir.SUMMARY}): not a whole baseline")
    return diffs


def _sampling_differences(plan: CheckPlan, prompts: PromptSet, s: SamplingSetting, info: RunInfo) -> list[str]:
    """The sampling values the run sent against those the cell will send (or, for older runs, the overrides)."""
    overrides = SamplingOverrides(temperature=s.temperature, top_p=s.top_p, max_tokens=plan.max_tokens)
    if info.sent_sampling:
        cell = sampling_on_the_wire(plan.api, prompts, overrides, plan.max_tokens)
        return [
            f"sampling sent, {k}: {info.sent_sampling.get(k)} in the run, {v} in the cell"
            for k, v in cell.items()
            if info.sent_sampling.get(k) != v
        ]
    a, b = info.sampling.model_dump(), overrides.model_dump()
    return [f"sampling.{k}: {a[k]!r} in the run, {b[k]!r} in the cell" for k in a if a[k] != b[k]]


def _foreign_differences(
    plan: CheckPlan, prompts: PromptSet, cell: PlanCell, run: LoadedRun
) -> tuple[list[str], list[str], LoadedRun]:
    """What a vllm bench or GuideLLM file can be checked on; its requests relabelled with the cell's segment."""
    diffs: list[str] = []
    most = max((r.output_tokens or 0 for r in run.records if r.ok), default=0)
    if most > plan.max_tokens:
        diffs.append(f"max_tokens: a request of the run produced {most} tokens, the plan's max_tokens is {plan.max_tokens}")
    segments = sorted({item.segment for item in prompts.items})
    if len(segments) > 1:
        diffs.append(
            f"prompt source {prompts.source} has segments {', '.join(segments)}, analysed apart; a {run.format} file "
            "does not record which prompt each request sent, so its requests cannot be split by segment"
        )
    warns = [
        f"max_tokens is not recorded in a {run.format} file: checked only that no request produced more than "
        f"{plan.max_tokens} tokens",
        f"a {run.format} file holds no server metrics: preemptions (a guardrail), KV-cache usage and waiting "
        "requests are not compared",
    ]
    if cell.sampling.temperature == 0:
        warns.append(f"greedy outputs are not compared: a {run.format} file holds no output token ids")
    records = [r.model_copy(update={"segment": segments[0]}) for r in run.records]
    return diffs, warns, replace(run, records=records)


def _decision_needs(plan: CheckPlan, cell: PlanCell, run: LoadedRun) -> tuple[list[str], list[str]]:
    """What the plan's decision needs of the baseline that this run cannot give (refused), or gives only in part."""
    diffs: list[str] = []
    notes: list[str] = []
    has_itl = bool(metric_values(run.records, "itl_ms"))
    if plan.objective.metric == "itl_ms" and not has_itl:
        diffs.append(
            f"the objective itl_ms needs per-token ITL and no request of this {run.format} run has it (see the "
            "format's notes under 'compare'); tpot_ms is exact for it"
        )
    uses_goodput = plan.objective.metric == "goodput" or plan.guardrails.max_goodput_drop is not None
    timed = len({r.sent_s for r in run.records}) > 1 or len(run.records) <= 1
    if not timed and uses_goodput:
        diffs.append("goodput counts met requests per second of the run's window, and the run records no send times")
    elif not timed:  # the window is then the longest request: its rates are shown, and are not the run's
        notes.append("the run records no send times: the baseline's output tokens/s (and goodput) are not known")
    if uses_goodput and plan.slo is not None and plan.slo.itl_ms is not None and not has_itl:
        diffs.append("the SLO's itl_ms needs per-token ITL, which no request of this run has")
    if cell.sampling.temperature == 0 and run.format == "specguard" and not _has_outputs(run):
        if plan.equivalence.guardrail:
            diffs.append("the greedy-output guardrail needs the baseline's outputs; make the run with bench --keep-output")
        else:
            notes.append("greedy outputs are not compared: the run kept none (bench --keep-output keeps them)")
    elif cell.sampling.temperature == 0 and plan.equivalence.guardrail and run.format != "specguard":
        diffs.append(f"the greedy-output guardrail needs the baseline's outputs, which a {run.format} file does not hold")
    return diffs, notes


def _has_outputs(run: LoadedRun) -> bool:
    return RunDir(Path(run.name)).outputs_jsonl.exists() or any(r.output_token_ids is not None for r in run.records)
