"""From a check's stored runs to per-cell comparisons for the verdict: reads run directories, no servers."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from specguard.analysis.ab_statistics import compare_pooled_percentile, pool_log_ratios
from specguard.analysis.compare import compare_repetitions, metric_values, throughput_ratio
from specguard.analysis.gpu_usage import mean_utilisation
from specguard.analysis.slo import compare_goodput
from specguard.check.outputs import cell_equivalence
from specguard.check.plan import CheckPlan, TrafficLevel, plan_cells
from specguard.results.check_dir import ARMS, CheckDir, cell_key
from specguard.results.models import RequestRecord, Summary, WarningNote
from specguard.results.run_dir import load_run, load_summary
from specguard.verdict import CellComparison, OneArmCell
from specguard.verdict.level_guards import LEVEL_PERCENTILES
from specguard.verdict.model import LevelComparison

_CLIENT_WARNINGS = ("send lag", "event-loop lag", "foreign traffic")
CLIENT_WARNING_KINDS = ("client_send_lag", "client_event_loop_lag", "foreign_traffic")  # the same warnings, by kind
# One cell x segment's requests per repetition, per arm, for a traffic level's pooled tests.
_CellRecords = tuple[list[list[RequestRecord]], list[list[RequestRecord]]]


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _acceptance_rate(summaries: Sequence[Summary]) -> float | None:
    accs = [s.acceptance for s in summaries if s.acceptance is not None]
    drafted = sum(a.draft_tokens for a in accs)
    return sum(a.accepted_tokens for a in accs) / drafted if drafted > 0 else None


def cell_comparisons(plan: CheckPlan, out: Path, skip: Collection[str] = ()) -> list[CellComparison]:
    """Every cell measured on both arms, segment by segment; ``skip``: cell keys not to compare (the verdict says why)."""
    return comparisons(plan, out, skip)[0]


def comparisons(plan: CheckPlan, out: Path, skip: Collection[str] = ()) -> tuple[list[CellComparison], list[LevelComparison]]:
    """The cells (``cell_comparisons``) and each traffic level's guardrails over its cells, from one read of the runs."""
    cells: list[CellComparison] = []
    pooled: dict[str, list[_CellRecords]] = {}
    for cell in plan_cells(plan):
        key, traffic, sampling = cell.key, cell.traffic, cell.sampling
        if key in skip:
            continue
        records: dict[str, list[list[RequestRecord]]] = {}
        summaries: dict[str, list[Summary]] = {}
        for arm in ARMS:
            dirs = CheckDir(out).measured_runs(arm, key, plan.repetitions)
            records[arm] = [load_run(d)[1] for d in dirs]
            summaries[arm] = [load_summary(d) for d in dirs]
        if not records["baseline"] or not records["candidate"]:
            continue  # one_arm_cells names it for the verdict
        # greedy-output equivalence: only where decoding is greedy (temperature 0)
        equivalence = cell_equivalence(plan, out, key) if sampling.temperature == 0 else None
        segments = sorted({r.segment for reps in records.values() for rep in reps for r in rep})
        for seg in segments:
            b = [[r for r in rep if r.segment == seg] for rep in records["baseline"]]
            c = [[r for r in rep if r.segment == seg] for rep in records["candidate"]]
            pooled.setdefault(traffic.name, []).append((b, c))
            m = compare_repetitions(
                b,
                c,
                seed=plan.seed,
                resamples=plan.statistics.resamples,
                min_tail=plan.statistics.min_tail_samples,
                # the sample-size advice sizes for the change the objective counts
                target_change=plan.objective.min_improvement,
            )
            if plan.slo is not None:
                # candidate/baseline goodput, this segment's met requests over each run's whole window
                m["goodput"] = {
                    "rate": compare_goodput(
                        records["baseline"],
                        records["candidate"],
                        plan.slo,
                        segment=seg,
                        seed=plan.seed,
                        resamples=plan.statistics.resamples,
                        min_tail=plan.statistics.min_tail_samples,
                        target_change=plan.objective.min_improvement,
                    )
                }
            if plan.objective.metric == "goodput":
                objective = m["goodput"]["rate"]
            elif plan.objective.metric == "output_tokens_per_s":
                objective = throughput_ratio(
                    [s.output_tokens_per_s for s in summaries["baseline"]],
                    [s.output_tokens_per_s for s in summaries["candidate"]],
                )
            else:
                objective = m[plan.objective.metric][plan.objective.percentile]
            sb, sc = summaries["baseline"], summaries["candidate"]
            nb = sum(len(rep) for rep in b)
            nc = sum(len(rep) for rep in c)
            warnings = [
                f"{arm}: {w}" for arm in ARMS for s in summaries[arm] for w in s.warnings if any(k in w for k in _CLIENT_WARNINGS)
            ]
            notes: dict[str, WarningNote] = {}
            for arm in ARMS:
                for s in summaries[arm]:
                    for n in s.warning_notes:
                        if n.kind in CLIENT_WARNING_KINDS:
                            text = f"{arm}: {n.text}"
                            notes[text] = n.model_copy(update={"text": text, "where": arm})
            cells.append(
                CellComparison(
                    traffic=traffic.name,
                    offered_load=traffic.offered_load,
                    target=traffic.target,
                    sampling=sampling.name,
                    segment=seg,
                    objective=objective,
                    p99_e2e=m["e2e_ms"]["p99"],
                    p99_ttft=m["ttft_ms"]["p99"],
                    error_rate_baseline=sum(not r.ok for rep in b for r in rep) / nb if nb else 0.0,
                    error_rate_candidate=sum(not r.ok for rep in c for r in rep) / nc if nc else 0.0,
                    errors_baseline=sum(not r.ok for rep in b for r in rep),
                    errors_candidate=sum(not r.ok for rep in c for r in rep),
                    requests_baseline=nb,
                    requests_candidate=nc,
                    preemptions_baseline=_sum_or_none([s.preemptions for s in sb]),
                    preemptions_candidate=_sum_or_none([s.preemptions for s in sc]),
                    acceptance_rate=_acceptance_rate(sc),
                    kv_usage_baseline=_mean([s.kv_cache_usage.mean if s.kv_cache_usage else None for s in sb]),
                    kv_usage_candidate=_mean([s.kv_cache_usage.mean if s.kv_cache_usage else None for s in sc]),
                    waiting_baseline=_mean([s.requests_waiting.mean if s.requests_waiting else None for s in sb]),
                    waiting_candidate=_mean([s.requests_waiting.mean if s.requests_waiting else None for s in sc]),
                    gpu_util_baseline=_mean([mean_utilisation(s) for s in sb]),
                    gpu_util_candidate=_mean([mean_utilisation(s) for s in sc]),
                    tokens_per_s_baseline=_mean([s.output_tokens_per_s for s in sb]),
                    tokens_per_s_candidate=_mean([s.output_tokens_per_s for s in sc]),
                    client_warnings=sorted(set(warnings)),
                    client_notes=[notes[t] for t in sorted(notes)],
                    metrics=m,
                    equivalence=equivalence.get(seg) if equivalence is not None else None,
                )
            )
    return cells, [
        level_comparison(plan, traffic, pooled[traffic.name], cells) for traffic in plan.levels if traffic.name in pooled
    ]


def level_comparison(
    plan: CheckPlan, traffic: TrafficLevel, records: list[_CellRecords], cells: list[CellComparison]
) -> LevelComparison:
    """One traffic level's P99/P90/P50 E2E and TTFT over all its cells (a stratified bootstrap), and its goodput."""
    st = plan.statistics
    tables = {}
    for metric in ("e2e_ms", "ttft_ms"):
        base = [[metric_values(rep, metric) for rep in b] for b, _ in records]
        cand = [[metric_values(rep, metric) for rep in c] for _, c in records]
        tables[metric] = {
            name: compare_pooled_percentile(
                base,
                cand,
                q,
                seed=plan.seed,
                resamples=st.resamples,
                min_tail=st.min_tail_samples,
                target_change=plan.objective.min_improvement,
            )
            for name, q in LEVEL_PERCENTILES.items()
        }
    at = [c for c in cells if c.traffic == traffic.name]
    goodputs = [r for c in at if (r := c.metrics.get("goodput", {}).get("rate")) is not None]
    return LevelComparison(
        traffic=traffic.name,
        offered_load=traffic.offered_load,
        target=traffic.target,
        cells=[c.name for c in at],
        e2e=tables["e2e_ms"],
        ttft=tables["ttft_ms"],
        goodput=pool_log_ratios(goodputs) if goodputs else None,
    )


def _sum_or_none(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) if vals else None


def one_arm_cells(plan: CheckPlan, out: Path) -> list[OneArmCell]:
    """Cells with measured runs on one arm only: ``cell_comparisons`` cannot compare them, the verdict must say so.

    The segment is the prompt source's segments as its runs name them, or the source itself when none does.
    """
    found: list[OneArmCell] = []
    for traffic in plan.levels:
        for sampling in plan.sampling:
            for i, source in enumerate(plan.prompts):
                key = cell_key(traffic.name, sampling.name, i)
                dirs = {arm: CheckDir(out).measured_runs(arm, key, plan.repetitions) for arm in ARMS}
                measured = [arm for arm in ARMS if dirs[arm]]
                if len(measured) != 1:
                    continue
                segments = sorted({r.segment for d in dirs[measured[0]] for r in load_run(d)[1]}) or [source.source]
                found += [
                    OneArmCell(traffic=traffic.name, sampling=sampling.name, segment=seg, measured=measured[0])
                    for seg in segments
                ]
    return found
