"""Alerting rules: the candidate against the rollout's budgets relative to the baseline, and each pool's health.

Budgets are the rollout's own (``analysis.metrics``): a latency percentile as a ratio of the baseline's,
the error rate, waiting requests and KV-cache usage as a difference, held for ``rollback_windows``
windows, as the controller judges them. Health alerts hold for every pool: a server down or restarted (an
OOM kills the process: ``up`` drops to 0, the process start time changes, vLLM's counters reset),
preemptions (the KV cache ran out). Acceptance below the checklist's warning line is a warning, not a
rollback condition: the checklist says the line is no substitute for the service benchmark.
Annotations are static text (no ``$value``): what each alert means, its formula and the vLLM releases.
"""

from __future__ import annotations

from specguard.canary.observability.conventions import POOL_LABEL, RESTART_LOOKBACK, server_group_labels
from specguard.canary.observability.recording import (
    ACCEPTANCE_RATE,
    KV_CACHE_USAGE,
    PROXY_ERROR_RATIO,
    REQUESTS_WAITING,
    RecordingPlan,
    latency_record,
    latency_series,
)
from specguard.canary.observability.rulefile import AlertingRule, RuleFile, RuleGroup
from specguard.canary.spec.rollout import MetricBudget, Rollout
from specguard.server_metrics import names
from specguard.sizing.recommend import NGRAM_GOOD_ACCEPTANCE

__all__ = ["ACCEPTANCE_WARNING_LINE", "alerting_rules"]

# The checklist's "low acceptance means speculation is likely net-negative" line; the same 0.5 the verdict
# (verdict/decide.py) and bench's summary warn at, owned by sizing's constant.
ACCEPTANCE_WARNING_LINE = NGRAM_GOOD_ACCEPTANCE

_TITLE = {"itl_ms": "Itl", "ttft_ms": "Ttft", "e2e_ms": "E2e", "tpot_ms": "Tpot"}
_GAUGE_RECORD = {"requests_waiting": REQUESTS_WAITING, "kv_cache_usage": KV_CACHE_USAGE, "error_rate": PROXY_ERROR_RATIO}
_GAUGE_TITLE = {"requests_waiting": "RequestsWaiting", "kv_cache_usage": "KvCacheUsage", "error_rate": "ErrorRate"}


def _pool(record: str, pool: str) -> str:
    return f'{record}{{{POOL_LABEL}="{pool}"}}'


def _budget_alert(rollout: Rollout, plan: RecordingPlan, budget: MetricBudget) -> AlertingRule | None:
    worse = ">" if budget.direction == "lower_is_better" else "<"
    labels = {"severity": "critical", "specguard_rollout": rollout.name, "specguard_metric": budget.key}
    if budget.percentile is not None:
        series = latency_series(budget.metric, plan.release)
        if series is None:
            return None
        record = latency_record(budget.metric, budget.percentile)
        factor = 1 + budget.budget if worse == ">" else 1 - budget.budget
        expr = f"{_pool(record, 'candidate')} {worse} ignoring({POOL_LABEL}) group_left {factor:g} * {_pool(record, 'baseline')}"
        name = f"SpecguardCandidate{_TITLE[budget.metric]}{budget.percentile.upper()}Regression"
        formula = f"candidate / baseline of histogram_quantile({budget.percentile[1:]}%, {series}) {worse} {factor:g}"
        releases = names.releases_text(series)
        meaning = f"the candidate's {budget.key} is more than {budget.budget:.0%} worse than the baseline's"
    else:
        record = _GAUGE_RECORD[budget.metric]
        if record == KV_CACHE_USAGE and names.name_for(names.GAUGES["kv_cache_usage"], plan.release) is None:
            return None
        sign = "+" if worse == ">" else "-"
        baseline = f"{_pool(record, 'baseline')} {sign} {budget.budget:g}"
        expr = f"{_pool(record, 'candidate')} {worse} ignoring({POOL_LABEL}) group_left {baseline}"
        name = f"SpecguardCandidate{_GAUGE_TITLE[budget.metric]}Regression"
        formula = f"candidate {record} - baseline {worse} {budget.budget:g}"
        if budget.metric == "error_rate":
            releases = "any (the specguard proxy's counters)"
        else:
            gauge = names.name_for(names.GAUGES[budget.metric], plan.release)
            releases = names.releases_text(gauge) if gauge else "none"
        meaning = f"the candidate's {budget.metric} exceeds the baseline's by more than {budget.budget:g}"
    return AlertingRule(
        alert=name,
        expr=expr,
        for_=plan.windows.hold,
        labels=labels,
        annotations={
            "summary": f"{rollout.name}: {meaning}",
            "description": (
                f"Held for {plan.windows.hold} ({rollout.analysis.rollback_windows} analysis windows), as the canary "
                "controller rolls back; see the rollout's analysis budgets."
            ),
            "formula": formula,
            "vllm_releases": releases,
        },
        comment=[f"Budget {budget.key}: {budget.budget:g} ({budget.comparison}, {budget.direction})."],
    )


def _health(rollout: Rollout, plan: RecordingPlan) -> list[AlertingRule]:
    by = f"by ({', '.join(server_group_labels(rollout))})"
    w = plan.windows.rate
    common = {"specguard_rollout": rollout.name}
    start, prompt = names.PROCESS_START, names.COUNTERS["prompt_tokens"][0]
    preemptions = names.COUNTERS["preemptions"][0]
    pooled = f'{POOL_LABEL}!=""'
    return [
        AlertingRule(
            alert="SpecguardPoolServerDown",
            expr=f"up{{{pooled}}} == 0",
            for_=w,
            labels={"severity": "critical", **common},
            annotations={
                "summary": f"{rollout.name}: a pool's server does not answer its scrape",
                "description": "up == 0 for one analysis window: the server is down, restarting, or out of memory.",
                "formula": "up == 0",
                "vllm_releases": "any",
            },
        ),
        AlertingRule(
            alert="SpecguardPoolServerRestarted",
            expr=f"changes({start}{{{pooled}}}[{RESTART_LOOKBACK}]) > 0 or resets({prompt}{{{pooled}}}[{RESTART_LOOKBACK}]) > 0",
            labels={"severity": "critical", **common},
            annotations={
                "summary": f"{rollout.name}: a pool's server restarted in the last {RESTART_LOOKBACK}",
                "description": (
                    "The process start time changed, or vLLM's prompt-token counter reset (servers in Prometheus "
                    "multiprocess mode export no process metrics). An OOM kill shows up this way."
                ),
                "formula": f"changes({start}) > 0 or resets({prompt}) > 0",
                "vllm_releases": names.releases_text(prompt),
            },
        ),
        AlertingRule(
            alert="SpecguardPoolPreempting",
            expr=f"sum {by} (increase({preemptions}{{{pooled}}}[{w}])) > 0",
            for_=plan.windows.hold,
            labels={"severity": "warning", **common},
            annotations={
                "summary": f"{rollout.name}: a pool preempts requests (its KV cache runs out)",
                "description": "Speculation takes KV blocks for drafts and lookahead slots; preemptions recompute work.",
                "formula": f"increase({preemptions}) > 0",
                "vllm_releases": names.releases_text(preemptions),
            },
        ),
        AlertingRule(
            alert="SpecguardCandidateAcceptanceLow",
            expr=f"{_pool(ACCEPTANCE_RATE, 'candidate')} < {ACCEPTANCE_WARNING_LINE:g}",
            for_=plan.windows.hold,
            labels={"severity": "warning", **common},
            annotations={
                "summary": f"{rollout.name}: the candidate accepts fewer than {ACCEPTANCE_WARNING_LINE:.0%} of draft tokens",
                "description": (
                    "The checklist's warning line: low acceptance means speculation is likely net-negative. "
                    "A warning, not a substitute for the latency budgets."
                ),
                "formula": f"{ACCEPTANCE_RATE} < {ACCEPTANCE_WARNING_LINE:g} (see recording-rules.yaml)",
                "vllm_releases": names.releases_text(names.COUNTERS["spec_accepted_tokens"][0]),
            },
        ),
    ]


def alerting_rules(rollout: Rollout, plan: RecordingPlan) -> RuleFile:
    """The alerting-rule file; it reads the series ``recording_rules`` records (load both files)."""
    budgets = [a for b in rollout.analysis.metrics if (a := _budget_alert(rollout, plan, b)) is not None]
    group = RuleGroup(name=f"specguard-canary-{rollout.name}-alerts", rules=[*budgets, *_health(rollout, plan)])
    return RuleFile(groups=[group])
