"""``promtool test rules`` for the generated alerts (``canary observability --with-tests``): each alert fired by
series that break it and kept quiet by series that do not, so an operator who edits the rules can rerun them.

Pure: the rollout, its plan and the alerting rules in, the test file's document out. The series are built
from the rule's own budget (a candidate twice past it fires; one level with the baseline stays quiet), over
ten minutes of 15 s samples, evaluated at the end: long enough for every ``for`` the rollout can give
(``rollback_windows`` windows of at least 60 s) up to 8 windows; a longer hold moves the evaluation out.
Histograms use one finite bucket per pool, ``le = x``: every observation in (0, x], so histogram_quantile(q) is
exactly q * x and the candidate-to-baseline ratio is the ratio of the two bounds. A Gateway's error alert reads
the operator's own ``engine_responses`` expressions, whose input series specguard cannot know: it is listed
in the file's header as not driven here.
"""

from __future__ import annotations

from typing import Any

from specguard.canary.observability.alerts import CONTROLLER_DECISIONS, CONTROLLER_EVENTS
from specguard.canary.observability.conventions import POOL_LABEL, PROXY_JOB
from specguard.canary.observability.recording import HAPROXY_RESPONSES, PROXY_ERROR_RATIO, RecordingPlan, latency_series
from specguard.canary.observability.rulefile import AlertingRule, RuleFile
from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.rollout import MetricBudget, Rollout
from specguard.server_metrics import names

__all__ = ["TEST_FILE", "rule_tests"]

TEST_FILE = "rules-test.yaml"
_SCRAPE_S = 15
_Series = list[dict[str, str]]


def _lbl(pairs: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def _counter(name: str, per_scrape: float, steps: int, **labels: str) -> dict[str, str]:
    return {"series": f"{name}{_lbl(labels)}", "values": f"0+{per_scrape:g}x{steps}"}


def _gauge(name: str, value: float, steps: int, **labels: str) -> dict[str, str]:
    return {"series": f"{name}{_lbl(labels)}", "values": f"{value:g}x{steps}"}


def _step(name: str, before: float, after: float, steps: int, **labels: str) -> dict[str, str]:
    """A series at ``before`` for the first three quarters, ``after`` from then on."""
    cut = steps * 3 // 4
    return {"series": f"{name}{_lbl(labels)}", "values": f"{before:g}x{cut} {after:g}x{steps - cut}"}


def _pool(pool: str) -> dict[str, str]:
    return {POOL_LABEL: pool}


def _budget(rollout: Rollout, plan: RecordingPlan, budget: MetricBudget, steps: int) -> tuple[_Series, _Series, dict[str, str]]:
    """(firing series, quiet series, the firing alert's labels from the series) for a budget's alert."""
    worse_up = budget.direction == "lower_is_better"
    cand = _pool("candidate")
    if budget.percentile is not None:
        measured = "tpot_ms" if budget.metric == "itl_ms" else budget.metric
        series = latency_series(measured, plan.release)
        assert series is not None  # the alert exists only where the release has the histogram
        factor = 1 + budget.budget if worse_up else 1 - budget.budget
        fire_bound = 0.1 * (2 * factor if worse_up else factor / 2)

        def hist(pool: str, bound: float) -> _Series:
            return [
                _counter(f"{series}_bucket", 10, steps, **_pool(pool), le=f"{bound:g}"),
                _counter(f"{series}_bucket", 10, steps, **_pool(pool), le="+Inf"),
            ]

        base = hist("baseline", 0.1)
        return base + hist("candidate", fire_bound), base + hist("candidate", 0.1), cand
    if budget.metric == "error_rate":
        return _errors(rollout, plan, budget.budget, steps)
    gauge = names.name_for(names.GAUGES[budget.metric], plan.release)
    assert gauge is not None
    level = 0.3 if budget.metric == "kv_cache_usage" else 1.0
    far = level + 2 * budget.budget if worse_up else level - 2 * budget.budget
    base = [_gauge(gauge, level, steps, **_pool("baseline"))]
    return base + [_gauge(gauge, far, steps, **cand)], base + [_gauge(gauge, level, steps, **cand)], cand


def _errors(rollout: Rollout, plan: RecordingPlan, budget: float, steps: int) -> tuple[_Series, _Series, dict[str, str]]:
    # 1,000 responses a scrape per pool; the baseline fails 0.1 %, the candidate 0.1 % + 2 x budget (or 0.1 %).
    base_fail, fire_fail = 1.0, 1.0 + 2000.0 * budget
    engine = rollout.engine
    if plan.error_ratio == PROXY_ERROR_RATIO:

        def proxy(pool: str, failed: float) -> _Series:
            labels = {"pool": pool, "segment": "default"}
            return [
                _counter("specguard_canary_requests_total", 1000, steps, **labels),
                _counter("specguard_canary_errors_total", failed, steps, **labels),
            ]

        base = proxy("baseline", base_fail)
        labels = {**_pool("candidate"), "segment": "default"}
        return base + proxy("candidate", fire_fail), base + proxy("candidate", base_fail), labels
    assert isinstance(engine, HAProxyEngine)
    first = {"baseline": engine.baseline_servers[0], "candidate": engine.candidate_servers[0]}

    def responses(pool: str, failed: float) -> _Series:
        labels = {"proxy": engine.backend, "server": first[pool]}
        return [
            _counter(HAPROXY_RESPONSES, 1000 - failed, steps, **labels, code="2xx"),
            _counter(HAPROXY_RESPONSES, failed, steps, **labels, code="5xx"),
        ]

    base = responses("baseline", base_fail)
    return base + responses("candidate", fire_fail), base + responses("candidate", base_fail), _pool("candidate")


def _health(name: str, plan: RecordingPlan, steps: int) -> tuple[_Series, _Series, dict[str, str]] | None:
    target = {"job": "vllm-candidate", "instance": "10.0.0.2:8000", **_pool("candidate")}
    admin = {"job": PROXY_JOB, "instance": "127.0.0.1:9091"}
    if name == "SpecguardPoolServerDown":
        return [_step("up", 1, 0, steps, **target)], [_gauge("up", 1, steps, **target)], target
    if name == "SpecguardPoolServerRestarted":
        start = names.PROCESS_START
        return [_step(start, 1000, 1600, steps, **target)], [_gauge(start, 1000, steps, **target)], target
    if name == "SpecguardPoolPreempting":
        preemptions = names.COUNTERS["preemptions"][0]
        return [_counter(preemptions, 1, steps, **target)], [_counter(preemptions, 0, steps, **target)], _pool("candidate")
    if name == "SpecguardCandidateAcceptanceLow":
        accepted, drafted = names.COUNTERS["spec_accepted_tokens"][0], names.COUNTERS["spec_draft_tokens"][0]

        def acceptance(per_scrape: float) -> _Series:
            return [_counter(accepted, per_scrape, steps, **target), _counter(drafted, 10, steps, **target)]

        return acceptance(2), acceptance(8), _pool("candidate")
    if name == "SpecguardControllerDown":
        return [_step("up", 1, 0, steps, **admin)], [_gauge("up", 1, steps, **admin)], admin
    for alert, series, kind, other in (
        ("SpecguardCanaryRolledBack", CONTROLLER_DECISIONS, "rollback", "hold"),
        ("SpecguardEngineDrift", CONTROLLER_EVENTS, "drift", "window"),
    ):
        if name == alert:
            fired = {**admin, "kind": kind}
            return [_step(series, 0, 1, steps, **fired)], [_counter(series, 1, steps, **admin, kind=other)], fired
    return None


def _rendered(annotations: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
    pool = labels.get(POOL_LABEL, "")
    return {k: v.replace("{{ $labels." + POOL_LABEL + " }}", pool) for k, v in annotations.items()}


def _place(tests: list[dict[str, Any]], how: str, series: _Series, check: dict[str, Any]) -> None:
    """Into the first test of its kind that has none of these series (promtool starts over for each test, ~0.1 s:
    30 tests of one alert each took 2.7 s, a few shared ones a tenth of it); alerts are checked by name, so one
    alert's series do not disturb another's check."""
    names = {s["series"] for s in series}
    for test in tests:
        if test["name"].startswith(how) and not names & {s["series"] for s in test["input_series"]}:
            test["input_series"] += series
            test["alert_rule_test"].append(check)
            return
    count = sum(t["name"].startswith(how) for t in tests)
    tests.append(
        {"name": f"{how} {count + 1}", "interval": f"{_SCRAPE_S}s", "input_series": list(series), "alert_rule_test": [check]}
    )


def rule_tests(
    rollout: Rollout, plan: RecordingPlan, alerting: RuleFile, rule_files: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """The ``promtool test rules`` document and the alerts it does not drive (with why)."""
    # Long enough for a rate window, the hold and a quarter after the step change; short: promtool evaluates
    # every rule at every step of every test (40 steps took 3.8 s for this file, 20 steps half that).
    steps = (plan.windows.rate_s + plan.windows.for_s) // _SCRAPE_S + 8
    budgets = {b.key: b for b in rollout.analysis.metrics}
    tests: list[dict[str, Any]] = []
    not_driven: list[str] = []
    for group in alerting.groups:
        for rule in group.rules:
            if not isinstance(rule, AlertingRule):
                continue
            key = rule.labels.get("specguard_metric")
            if key is not None and budgets[key].metric == "error_rate" and plan.error_ratio not in (PROXY_ERROR_RATIO, None):
                if not isinstance(rollout.engine, HAProxyEngine):
                    not_driven.append(f"{rule.alert} (it reads metrics.engine_responses, the operator's own series)")
                    continue
            scenario = _budget(rollout, plan, budgets[key], steps) if key is not None else _health(rule.alert, plan, steps)
            if scenario is None:
                not_driven.append(f"{rule.alert} (no scenario for it here)")
                continue
            firing, quiet, labels = scenario
            fired = {"exp_labels": {**labels, **rule.labels}, "exp_annotations": _rendered(rule.annotations, labels)}
            for series, expected in ((firing, [fired]), (quiet, [])):
                check = {"alertname": rule.alert, "eval_time": f"{steps * _SCRAPE_S}s", "exp_alerts": expected}
                _place(tests, "fires" if expected else "stays quiet", series, check)
    return {"rule_files": rule_files, "evaluation_interval": f"{_SCRAPE_S}s", "tests": tests}, not_driven
