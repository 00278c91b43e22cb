"""Parse /metrics text into a MetricsSample, and derive run-window figures from two samples. Pure."""

from __future__ import annotations

from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from specguard.results.models import Acceptance, MetricsSample
from specguard.server_metrics import names


class MetricsParseError(ValueError):
    pass


def _aliases() -> dict[str, tuple[str, str, int]]:
    """exposed name -> (kind, canonical, preference rank; 0 is the newest name)."""
    out: dict[str, tuple[str, str, int]] = {}
    for kind, table in (("gauge", names.GAUGES), ("counter", names.COUNTERS)):
        for canonical, exposed in table.items():
            for rank, name in enumerate(exposed):
                out[name] = (kind, canonical, rank)
                if kind == "counter":
                    # A hand-written exporter may omit the _total suffix.
                    out[name.removesuffix("_total")] = (kind, canonical, rank)
    return out


_ALIASES = _aliases()


def parse_metrics_text(text: str, t_s: float, phase: str) -> MetricsSample:
    """Reduce a /metrics page to the figures specguard uses.

    Values are summed over label sets (engines, models) except KV-cache usage,
    which is averaged over engines. Raises MetricsParseError on text that is
    not Prometheus exposition.
    """
    values: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    exposed: dict[str, dict[int, str]] = defaultdict(dict)
    per_pos: dict[int, float] = defaultdict(float)
    by_reason: dict[str, float] = defaultdict(float)
    cache_info: dict[str, str] | None = None
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                if s.name in (names.ACCEPTED_PER_POSITION, names.ACCEPTED_PER_POSITION.removesuffix("_total")):
                    per_pos[int(s.labels.get("position", "0"))] += s.value
                elif s.name in (names.REQUEST_SUCCESS, names.REQUEST_SUCCESS.removesuffix("_total")):
                    by_reason[s.labels.get("finished_reason", "unknown")] += s.value
                elif s.name == names.CACHE_CONFIG_INFO:
                    cache_info = {k: v for k, v in s.labels.items()}
                elif s.name in _ALIASES:
                    kind, canonical, rank = _ALIASES[s.name]
                    values[(kind, canonical)][rank].append(s.value)
                    exposed[canonical][rank] = s.name
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"unparsable /metrics text: {exc}") from exc
    gauges: dict[str, float] = {}
    counters: dict[str, float] = {}
    seen: dict[str, str] = {}
    for (kind, canonical), by_rank in values.items():
        rank = min(by_rank)
        vals = by_rank[rank]
        seen[canonical] = exposed[canonical][rank]
        if kind == "gauge":
            gauges[canonical] = sum(vals) / len(vals) if canonical == "kv_cache_usage" else sum(vals)
        else:
            counters[canonical] = sum(vals)
    positions = [per_pos[i] for i in range(max(per_pos) + 1)] if per_pos else []
    sample = MetricsSample(
        t_s=t_s,
        phase=phase,  # type: ignore[arg-type]  # the callers' phase names; MetricsSample validates them
        ok=True,
        gauges=gauges,
        counters=counters,
        accepted_per_position=positions,
        finished_by_reason=dict(by_reason),
        names_seen=seen,
        cache_config=cache_info,
    )
    return sample


def has_spec_decode(sample: MetricsSample) -> bool:
    return any(c in sample.counters for c in names.SPEC_DECODE_COUNTERS)


def counter_delta(before: MetricsSample, after: MetricsSample, name: str) -> float | None:
    if name not in before.counters or name not in after.counters:
        return None
    return after.counters[name] - before.counters[name]


def acceptance(before: MetricsSample, after: MetricsSample) -> Acceptance | None:
    """vLLM's acceptance figures over the window between two scrapes; None without spec-decode counters.

    rate = accepted / draft tokens; mean length = 1 + accepted / drafts;
    per position i = accepted_per_pos[i] / drafts (vllm-facts.md 3.5).
    """
    if not (has_spec_decode(before) and has_spec_decode(after)):
        return None
    drafts = counter_delta(before, after, "spec_drafts") or 0.0
    draft_tokens = counter_delta(before, after, "spec_draft_tokens") or 0.0
    accepted = counter_delta(before, after, "spec_accepted_tokens") or 0.0
    n = max(len(before.accepted_per_position), len(after.accepted_per_position))
    pos_before = before.accepted_per_position + [0.0] * (n - len(before.accepted_per_position))
    pos_after = after.accepted_per_position + [0.0] * (n - len(after.accepted_per_position))
    per_pos = [(a - b) / drafts if drafts > 0 else 0.0 for a, b in zip(pos_after, pos_before)]
    return Acceptance(
        rate=accepted / draft_tokens if draft_tokens > 0 else None,
        mean_length=1.0 + accepted / drafts if drafts > 0 else None,
        per_position=per_pos if drafts > 0 else [],
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
    )
