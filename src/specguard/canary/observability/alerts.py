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

from specguard.canary.observability.conventions import POOL_LABEL, PROXY_JOB, RESTART_LOOKBACK, server_group_labels
from specguard.canary.observability.recording import (
    ACCEPTANCE_RATE,
    KV_CACHE_USAGE,
    PROXY_ERROR_RATIO,
    REQUESTS_WAITING,
    RecordingPlan,
    latency_record,
    latency_series,
)
from specguard.canary.observability.rulefile import AlertingRule, RecordingRule, RuleFile, RuleGroup
from specguard.canary.spec.rollout import MetricBudget, Rollout
from specguard.canary.spec.vocabulary import runbook_anchor
from specguard.server_metrics import names
from specguard.sizing.recommend import NGRAM_GOOD_ACCEPTANCE

__all__ = ["ACCEPTANCE_WARNING_LINE", "CONTROLLER_DECISIONS", "CONTROLLER_EVENTS", "DEFAULT_RUNBOOK", "alerting_rules"]

# The controller's series on the admin API (control.series; with the proxy, ProxyMetrics has the decisions).
CONTROLLER_DECISIONS = "specguard_canary_decisions_total"
CONTROLLER_EVENTS = "specguard_canary_events_total"
# Where runbook_url points unless the command is told: RUNBOOK.md beside the rule files (``canary units`` writes it).
DEFAULT_RUNBOOK = "RUNBOOK.md"

# The checklist's "low acceptance means speculation is likely net-negative" line; the same 0.5 the verdict
# (verdict/decide.py) and bench's summary warn at, owned by sizing's constant.
ACCEPTANCE_WARNING_LINE = NGRAM_GOOD_ACCEPTANCE

_TITLE = {"itl_ms": "Itl", "ttft_ms": "Ttft", "e2e_ms": "E2e", "tpot_ms": "Tpot"}
_GAUGE_RECORD = {"requests_waiting": REQUESTS_WAITING, "kv_cache_usage": KV_CACHE_USAGE}
_GAUGE_TITLE = {"requests_waiting": "RequestsWaiting", "kv_cache_usage": "KvCacheUsage", "error_rate": "ErrorRate"}


# Per-pool alerts name their pool through Prometheus' template (rendered when the alert fires).
_POOL_TEMPLATE = "{{ $labels." + POOL_LABEL + " }}"


def _pool(record: str, pool: str) -> str:
    return f'{record}{{{POOL_LABEL}="{pool}"}}'


def _runbook(base: str, section: str) -> str:
    return f"{base}#{runbook_anchor(section)}"


def _budget_alert(rollout: Rollout, plan: RecordingPlan, budget: MetricBudget, runbook: str) -> AlertingRule | None:
    worse = ">" if budget.direction == "lower_is_better" else "<"
    labels = {"severity": "critical", "specguard_rollout": rollout.name, "specguard_metric": budget.key}
    why = ""
    if budget.percentile is not None:
        # The per-token budget is judged per token; vLLM's ITL histogram is per engine step, where a healthy
        # speculative step emits up to k+1 tokens and reads slower, so the alert reads TPOT (per output token).
        measured = "tpot_ms" if budget.metric == "itl_ms" else budget.metric
        series = latency_series(measured, plan.release)
        if series is None:
            return None
        if measured != budget.metric:
            why = (
                f" Read from TPOT ({series}), not vLLM's ITL histogram: ITL is observed once per engine step, and a "
                "speculative step emits up to k+1 tokens, so a healthy candidate reads slower per step and the alert "
                "would fire while the controller, which judges per token, promotes."
            )
        record = latency_record(measured, budget.percentile)
        factor = 1 + budget.budget if worse == ">" else 1 - budget.budget
        expr = f"{_pool(record, 'candidate')} {worse} ignoring({POOL_LABEL}) group_left {factor:g} * {_pool(record, 'baseline')}"
        name = f"SpecguardCandidate{_TITLE[budget.metric]}{budget.percentile.upper()}Regression"
        formula = f"candidate / baseline of histogram_quantile({budget.percentile[1:]}%, {series}) {worse} {factor:g}"
        releases = names.releases_text(series)
        meaning = f"the candidate pool's {budget.key} is more than {budget.budget:.0%} worse than the baseline pool's"
    else:
        gauge_record = plan.error_ratio if budget.metric == "error_rate" else _GAUGE_RECORD[budget.metric]
        if gauge_record is None:
            return None
        record = gauge_record
        if record == KV_CACHE_USAGE and names.name_for(names.GAUGES["kv_cache_usage"], plan.release) is None:
            return None
        sign = "+" if worse == ">" else "-"
        baseline = f"{_pool(record, 'baseline')} {sign} {budget.budget:g}"
        expr = f"{_pool(record, 'candidate')} {worse} ignoring({POOL_LABEL}) group_left {baseline}"
        name = f"SpecguardCandidate{_GAUGE_TITLE[budget.metric]}Regression"
        formula = f"candidate {record} - baseline {worse} {budget.budget:g}"
        if budget.metric == "error_rate":
            releases = "any (the specguard proxy's counters)" if record == PROXY_ERROR_RATIO else "any (the engine's counters)"
        else:
            gauge = names.name_for(names.GAUGES[budget.metric], plan.release)
            releases = names.releases_text(gauge) if gauge else "none"
        meaning = f"the candidate pool's {budget.metric} exceeds the baseline pool's by more than {budget.budget:g}"
    return AlertingRule(
        alert=name,
        expr=expr,
        for_=plan.windows.hold,
        labels=labels,
        annotations={
            "summary": f"canary {rollout.name}: {meaning}",
            "description": (
                f"Held for {plan.windows.hold} ({rollout.analysis.rollback_windows} analysis windows), as the canary "
                f"controller rolls back; see the rollout's analysis budgets.{why}"
            ),
            "runbook_url": _runbook(runbook, "rollback"),
            "formula": formula,
            "vllm_releases": releases,
        },
        comment=[f"Budget {budget.key}: {budget.budget:g} ({budget.comparison}, {budget.direction})."],
    )


def _health(rollout: Rollout, plan: RecordingPlan, runbook: str) -> list[AlertingRule]:
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
                "summary": f"canary {rollout.name}: a server of the {_POOL_TEMPLATE} pool does not answer its scrape",
                "runbook_url": _runbook(runbook, "verify"),
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
                "summary": (
                    f"canary {rollout.name}: a server of the {_POOL_TEMPLATE} pool restarted in the last {RESTART_LOOKBACK}"
                ),
                "runbook_url": _runbook(runbook, "verify"),
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
                "summary": f"canary {rollout.name}: the {_POOL_TEMPLATE} pool preempts requests (its KV cache runs out)",
                "runbook_url": _runbook(runbook, "status"),
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
                "summary": (
                    f"canary {rollout.name}: the candidate pool accepts fewer than {ACCEPTANCE_WARNING_LINE:.0%} of draft tokens"
                ),
                "runbook_url": _runbook(runbook, "status"),
                "description": (
                    "The checklist's warning line: low acceptance means speculation is likely net-negative. "
                    "A warning, not a substitute for the latency budgets."
                ),
                "formula": f"{ACCEPTANCE_RATE} < {ACCEPTANCE_WARNING_LINE:g} (see recording-rules.yaml)",
                "vllm_releases": names.releases_text(names.COUNTERS["spec_accepted_tokens"][0]),
            },
        ),
    ]


def _counted(rollout: Rollout, alert: str, counter: str, summary: str, description: str, runbook_url: str) -> AlertingRule:
    """A warning while the controller's ``counter`` moved within the lookback (one decision or event is enough)."""
    expr = f"increase({counter}[{RESTART_LOOKBACK}]) > 0"
    return AlertingRule(
        alert=alert,
        expr=expr,
        labels={"severity": "warning", "specguard_rollout": rollout.name},
        annotations={
            "summary": f"canary {rollout.name}: {summary}",
            "description": description,
            "formula": expr,
            "vllm_releases": "any",
            "runbook_url": runbook_url,
        },
    )


def _controller(rollout: Rollout, plan: RecordingPlan, runbook: str) -> list[AlertingRule]:
    """The controller itself: down, rolled back, or finding the engine other than it set it. Its series are on the
    admin API in every mode (``control.series``; the proxy's with the proxy), scraped as ``PROXY_JOB``."""
    common = {"specguard_rollout": rollout.name}
    job = f'job="{PROXY_JOB}"'
    return [
        AlertingRule(
            alert="SpecguardControllerDown",
            expr=f"up{{{job}}} == 0",
            for_=plan.windows.rate,
            labels={"severity": "critical", **common},
            annotations={
                "summary": f"canary {rollout.name}: the controller's admin API does not answer its scrape",
                "description": (
                    "up == 0 for one analysis window: nothing judges the candidate pool or rolls it back while this "
                    "lasts. Follow the manual rollback if the controller does not come back."
                ),
                "formula": "up == 0",
                "vllm_releases": "any",
                "runbook_url": _runbook(runbook, "manual"),
            },
        ),
        _counted(
            rollout,
            "SpecguardCanaryRolledBack",
            f'{CONTROLLER_DECISIONS}{{{job}, kind="rollback"}}',
            "the controller rolled the candidate pool back",
            "A rollback decision (a failed budget, a critical condition, or an operator's rollback): the baseline "
            "pool takes every new request. The event log says why.",
            _runbook(runbook, "events"),
        ),
        _counted(
            rollout,
            "SpecguardEngineDrift",
            f'{CONTROLLER_EVENTS}{{{job}, kind="drift"}}',
            "the engine's weights differed from what the controller set",
            "A drift event: the engine (HAProxy, the HTTPRoute) reported other weights than the controller set (a "
            "restarted HAProxy comes back with its configured weights); the controller re-applied them, and pauses "
            "with a critical event if they still differ.",
            _runbook(runbook, "status"),
        ),
    ]


def alerting_rules(rollout: Rollout, plan: RecordingPlan, runbook: str = DEFAULT_RUNBOOK) -> RuleFile:
    """The alerting-rule file; it reads the series ``recording_rules`` records (load both files). ``runbook``:
    where RUNBOOK.md (``canary units``) is published; each alert's ``runbook_url`` is one of its sections."""
    budgets = [a for b in rollout.analysis.metrics if (a := _budget_alert(rollout, plan, b, runbook)) is not None]
    rules: list[RecordingRule | AlertingRule] = [*budgets, *_health(rollout, plan, runbook), *_controller(rollout, plan, runbook)]
    group = RuleGroup(name=f"specguard-canary-{rollout.name}-alerts", rules=rules)
    return RuleFile(groups=[group])
