"""Recording rules: acceptance as the given vLLM release exposes it, and the pool series alerts and panels use.

Acceptance follows vLLM's own definitions (vllm-facts.md 3.5): rate = accepted / draft tokens, mean
acceptance length = 1 + accepted / drafts (the bonus token included, as vLLM logs it since 0.9.0), the
per-position rate = accepted at position i / drafts (unconditional: the first i+1 drafts all accepted).
Releases that can run the V0 engine (before 0.10.0) expose its acceptance-rate gauge; the checklist says to
use such a metric directly, so there the rate is the gauge where a server exposes it, else the counters'.
Metric names come from ``server_metrics.names``, chosen for the release; a rule whose inputs the release
does not expose is left out and the file says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specguard.canary.observability.conventions import POOL_LABEL, Windows, server_group_labels, windows
from specguard.canary.observability.rulefile import RecordingRule, RuleFile, RuleGroup
from specguard.canary.spec.engine import HAProxyEngine, ProxyEngine
from specguard.canary.spec.metrics import PrometheusMetrics
from specguard.canary.spec.rollout import LATENCY_METRICS, Rollout
from specguard.server_metrics import names
from specguard.vllm.knowledge import Version, version_text

__all__ = [
    "ACCEPTANCE_PER_POSITION",
    "ACCEPTANCE_RATE",
    "ENGINE_ERROR_RATIO",
    "ENGINE_REQUEST_RATE",
    "KV_CACHE_USAGE",
    "MEAN_ACCEPTANCE_LENGTH",
    "OUTPUT_TOKENS_RATE",
    "PROXY_ERROR_RATIO",
    "PROXY_REQUEST_RATE",
    "REQUESTS_WAITING",
    "RecordingPlan",
    "latency_record",
    "latency_series",
    "plan_recording",
    "recording_rules",
]

ACCEPTANCE_RATE = f"{POOL_LABEL}:vllm_spec_decode_acceptance_rate:ratio"
MEAN_ACCEPTANCE_LENGTH = f"{POOL_LABEL}:vllm_spec_decode_mean_acceptance_length:ratio"
ACCEPTANCE_PER_POSITION = f"{POOL_LABEL}:vllm_spec_decode_acceptance_per_position:ratio"
OUTPUT_TOKENS_RATE = f"{POOL_LABEL}:vllm_generation_tokens:rate"
REQUESTS_WAITING = f"{POOL_LABEL}:vllm_num_requests_waiting:avg"
KV_CACHE_USAGE = f"{POOL_LABEL}:vllm_kv_cache_usage:avg"
PROXY_ERROR_RATIO = f"{POOL_LABEL}:canary_proxy_errors:ratio"
PROXY_REQUEST_RATE = f"{POOL_LABEL}:canary_proxy_requests:rate"
ENGINE_ERROR_RATIO = f"{POOL_LABEL}:canary_engine_errors:ratio"
ENGINE_REQUEST_RATE = f"{POOL_LABEL}:canary_engine_requests:rate"
HAPROXY_RESPONSES = "haproxy_server_http_responses_total"
# A rollout's latency metric -> the histogram of ``names.HISTOGRAMS`` that measures it server-side.
_HISTOGRAM_OF = {"itl_ms": "itl", "ttft_ms": "ttft", "e2e_ms": "e2e", "tpot_ms": "tpot"}
_PROXY_SEGMENT = (POOL_LABEL, "segment")


def latency_record(metric: str, percentile: str) -> str:
    """``itl_ms``, ``p99`` -> ``specguard_pool:vllm_itl_seconds:p99``."""
    return f"{POOL_LABEL}:vllm_{_HISTOGRAM_OF[metric]}_seconds:{percentile}"


def latency_series(metric: str, release: Version) -> str | None:
    """The histogram (base name) release ``release`` exposes for a latency metric, or None."""
    return names.name_for(names.HISTOGRAMS[_HISTOGRAM_OF[metric]], release)


@dataclass(frozen=True)
class RecordingPlan:
    release: Version
    group: tuple[str, ...]
    windows: Windows
    percentiles: tuple[str, ...]
    omitted: tuple[str, ...]
    # The pools panels show: baseline and candidate, and the control pool where the rollout has one.
    pools: tuple[str, ...] = ("baseline", "candidate")
    # Where the error ratio and request rate come from: the proxy's counters, or the engine's (HAProxy's response
    # counters, a Gateway's ``metrics.engine_responses``); None behind a Gateway that names no counters.
    error_ratio: str | None = PROXY_ERROR_RATIO
    request_rate: str | None = PROXY_REQUEST_RATE
    segment_label: bool = True  # the proxy's series carry ``segment``; an engine's do not


def plan_recording(rollout: Rollout, release: Version) -> RecordingPlan:
    budgets = {m.percentile for m in rollout.analysis.metrics if m.percentile}
    percentiles = tuple(sorted({"p50", "p99"} | budgets, key=lambda p: int(p[1:])))
    omitted = [
        f"{metric} (no {' or '.join(names.HISTOGRAMS[_HISTOGRAM_OF[metric]])} in {version_text(release)})"
        for metric in LATENCY_METRICS
        if latency_series(metric, release) is None
    ]
    if names.name_for((names.COUNTERS["spec_drafts"][0],), release) is None:
        omitted.append("mean acceptance length and per-position acceptance (no num_drafts before 0.8.5)")
    pools = ("baseline", "candidate", "control") if rollout.pools.control is not None else ("baseline", "candidate")
    plan = RecordingPlan(release, server_group_labels(rollout), windows(rollout), percentiles, tuple(omitted), pools)
    if isinstance(rollout.engine, ProxyEngine):
        return plan
    if _engine_counts(rollout, plan) is None:
        omitted.append("the error ratio and request rate (a Gateway without metrics.engine_responses exports no counters here)")
        return replace(plan, omitted=tuple(omitted), error_ratio=None, request_rate=None, segment_label=False)
    return replace(plan, error_ratio=ENGINE_ERROR_RATIO, request_rate=ENGINE_REQUEST_RATE, segment_label=False)


def _engine_counts(rollout: Rollout, plan: RecordingPlan) -> tuple[str, str, str] | None:
    """(errors per second, responses per second, where from) per ``specguard_pool``, from the engine's counters."""
    w, engine = plan.windows.rate, rollout.engine
    if isinstance(engine, HAProxyEngine):
        pools = (
            ("baseline", engine.baseline_servers),
            ("candidate", engine.candidate_servers),
            ("control", engine.control_servers),
        )

        def per_pool(code: str) -> str:
            parts = []
            for pool, servers in pools:
                if not servers:
                    continue
                # Server names may hold '.', a regex wildcard: escaped (a PromQL string writes the backslash twice).
                names_re = "|".join(server.replace(".", "\\\\.") for server in servers)
                sel = f'proxy="{engine.backend}", server=~"{names_re}"{code}'
                parts.append(f'label_replace(sum(rate({HAPROXY_RESPONSES}{{{sel}}}[{w}])), "{POOL_LABEL}", "{pool}", "", "")')
            return " or ".join(parts)

        return per_pool(', code="5xx"'), per_pool(""), f"HAProxy's {HAPROXY_RESPONSES} (code class 5xx) per server of each pool"
    metrics = rollout.metrics
    if isinstance(metrics, PrometheusMetrics) and metrics.engine_responses is not None:
        # The operator's expressions are cumulative counts per specguard_pool: a subquery makes them a range to rate.
        errors, total = metrics.engine_responses.errors, metrics.engine_responses.total
        return f"rate(({errors})[{w}:])", f"rate(({total})[{w}:])", "the rollout's metrics.engine_responses expressions"
    return None


def _by(labels: tuple[str, ...]) -> str:
    return f"by ({', '.join(labels)})"


def _releases(*series: str) -> str:
    return "; ".join(f"{s}: {names.releases_text(s)}" for s in series)


def _acceptance(plan: RecordingPlan) -> list[RecordingRule]:
    by, w, release = _by(plan.group), plan.windows.rate, plan.release
    accepted = names.COUNTERS["spec_accepted_tokens"][0]
    draft_tokens = names.COUNTERS["spec_draft_tokens"][0]
    drafts = names.COUNTERS["spec_drafts"][0]
    gauge = names.GAUGES["spec_acceptance_rate_v0"][0]
    derived = f"sum {by} (rate({accepted}[{w}])) / sum {by} (rate({draft_tokens}[{w}]))"
    rules: list[RecordingRule] = []
    if names.exposed_in(gauge, release):
        rules.append(
            RecordingRule(
                record=ACCEPTANCE_RATE,
                expr=f"avg {by} ({gauge}) or ({derived})",
                comment=[
                    "Acceptance rate: the V0 engine's own gauge where a server exposes it (the checklist: use such a",
                    "metric directly), else accepted / draft tokens from the counters (V1 engine).",
                    f"  = {gauge}  or  rate({accepted}) / rate({draft_tokens})",
                    f"  applies to: {_releases(gauge, accepted)}",
                ],
            )
        )
    else:
        rules.append(
            RecordingRule(
                record=ACCEPTANCE_RATE,
                expr=derived,
                comment=[
                    "Acceptance rate: accepted draft tokens / draft tokens (vLLM's SpecDecodingProm definition).",
                    f"  = rate({accepted}) / rate({draft_tokens})",
                    f"  applies to: {_releases(accepted, draft_tokens)} (V1 from 0.8.3); no acceptance gauge since 0.10.0",
                ],
            )
        )
    if names.exposed_in(drafts, release):
        per_pos = names.ACCEPTED_PER_POSITION
        rules += [
            RecordingRule(
                record=MEAN_ACCEPTANCE_LENGTH,
                expr=f"1 + sum {by} (rate({accepted}[{w}])) / sum {by} (rate({drafts}[{w}]))",
                comment=[
                    "Mean acceptance length: tokens a draft step yields, the bonus token included (vLLM's log since",
                    "0.9.0; 0.8.5 logged it without the 1).",
                    f"  = 1 + rate({accepted}) / rate({drafts})",
                    f"  applies to: {_releases(drafts)}",
                ],
            ),
            RecordingRule(
                record=ACCEPTANCE_PER_POSITION,
                expr=(
                    f"sum {_by((*plan.group, 'position'))} (rate({per_pos}[{w}]))"
                    f" / ignoring(position) group_left sum {by} (rate({drafts}[{w}]))"
                ),
                comment=[
                    "Per-position acceptance: the share of drafts whose first position+1 tokens were all accepted.",
                    f"  = rate({per_pos}{{position=i}}) / rate({drafts})",
                    f"  applies to: {_releases(per_pos)}",
                ],
            ),
        ]
    return rules


def _pool_series(plan: RecordingPlan) -> list[RecordingRule]:
    by, w, release = _by(plan.group), plan.windows.rate, plan.release
    rules: list[RecordingRule] = []
    for metric in LATENCY_METRICS:
        series = latency_series(metric, release)
        if series is None:
            continue
        caveat = (
            [
                "  vLLM observes it once per engine step: a speculative step emits up to k+1 tokens, so the candidate's",
                "  per-step figure reads higher than its per-token ITL (the proxy's specguard_canary_itl_ms is per token).",
            ]
            if metric == "itl_ms"
            else []
        )
        for p in plan.percentiles:
            q = int(p[1:]) / 100
            rules.append(
                RecordingRule(
                    record=latency_record(metric, p),
                    expr=f"histogram_quantile({q:g}, sum {_by((*plan.group, 'le'))} (rate({series}_bucket[{w}])))",
                    comment=[
                        f"{metric.removesuffix('_ms').upper()} {p.upper()} in seconds, from the server's histogram.",
                        f"  = histogram_quantile({q:g}, rate({series}_bucket))",
                        f"  applies to: {_releases(series)}",
                        *caveat,
                    ],
                )
            )
    generation = names.COUNTERS["generation_tokens"][0]
    waiting = names.GAUGES["requests_waiting"][0]
    kv = names.name_for(names.GAUGES["kv_cache_usage"], release)
    rules.append(
        RecordingRule(
            record=OUTPUT_TOKENS_RATE,
            expr=f"sum {by} (rate({generation}[{w}]))",
            comment=[
                "Output tokens per second of the pool (accepted and bonus tokens alike).",
                f"  applies to: {_releases(generation)}",
            ],
        )
    )
    rules.append(
        RecordingRule(
            record=REQUESTS_WAITING,
            expr=f"avg {by} ({waiting})",
            comment=[
                "Requests waiting per server (engine) of the pool, as the rollout's budget compares them.",
                f"  applies to: {_releases(waiting)}",
            ],
        )
    )
    if kv is not None:
        rules.append(
            RecordingRule(
                record=KV_CACHE_USAGE,
                expr=f"avg {by} ({kv})",
                comment=["KV-cache usage (1 = full) per server of the pool.", f"  applies to: {_releases(kv)}"],
            )
        )
    return rules


def _proxy_series(plan: RecordingPlan) -> list[RecordingRule]:
    w = plan.windows.rate
    relabel = f'"{POOL_LABEL}", "$1", "pool", "(.*)"'
    by = _by(_PROXY_SEGMENT)
    rate_of = {c: f"sum {by} (label_replace(rate(specguard_canary_{c}_total[{w}]), {relabel}))" for c in ("errors", "requests")}
    return [
        RecordingRule(
            record=PROXY_REQUEST_RATE,
            expr=rate_of["requests"],
            comment=["Requests per second the specguard proxy sent to each pool and segment (its pool label copied)."],
        ),
        RecordingRule(
            record=PROXY_ERROR_RATIO,
            expr=f"{rate_of['errors']} / {rate_of['requests']}",
            comment=[
                "Error ratio at the proxy: failed upstream attempts (5xx, refused, broken streams; client",
                "disconnects excluded) / attempts, per pool and segment. Any vLLM release.",
            ],
        ),
    ]


def _engine_series(rollout: Rollout, plan: RecordingPlan) -> list[RecordingRule]:
    counts = _engine_counts(rollout, plan)
    if counts is None:
        return []
    errors, total, where = counts
    return [
        RecordingRule(
            record=ENGINE_REQUEST_RATE, expr=total, comment=[f"Responses per second of each pool at the engine: {where}."]
        ),
        RecordingRule(
            record=ENGINE_ERROR_RATIO,
            expr=f"({errors}) / ({total})",
            comment=[
                "Error ratio at the engine: 5xx responses / responses per pool (no proxy runs behind HAProxy or a",
                f"Gateway, so its counters do not exist): {where}. Any vLLM release.",
            ],
        ),
    ]


def recording_rules(rollout: Rollout, release: Version) -> tuple[RuleFile, RecordingPlan]:
    """The recording-rule file for ``rollout`` on vLLM ``release``, and the plan it was made from."""
    plan = plan_recording(rollout, release)
    traffic = _proxy_series(plan) if isinstance(rollout.engine, ProxyEngine) else _engine_series(rollout, plan)
    group = RuleGroup(
        name=f"specguard-canary-{rollout.name}-recording",
        interval=None,
        rules=[*_acceptance(plan), *_pool_series(plan), *traffic],
    )
    return RuleFile(groups=[group]), plan
