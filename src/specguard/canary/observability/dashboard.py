"""The canary's Grafana dashboard, as plain JSON with a pinned schema version.

No maintained Python library for Grafana objects is in the project's environment (grafanalib is not kept
up with Grafana's schema), so the JSON is written directly, against ``schemaVersion`` 39 (Grafana 10.4 and
11.0 write it; later Grafana migrates it forward on import). Panels read the recording rules' series where
there is one, so the dashboard and the alerts show the same numbers; every expression is plain PromQL
(no Grafana variables inside), so a test can give each to promtool.

The dashboard is pinned by its uid, ``DASHBOARD_VERSION`` (raised when the layout specguard writes changes)
and the sha256 of its canonical JSON (``dashboard_pin``): ``canary observability`` prints the pin, and a
canary with ``grafana:`` records it among its inventories and in each annotation, so that an annotation
says which dashboard, exactly, it was drawn on.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from specguard import __version__
from specguard.canary.observability.conventions import POOL_LABEL
from specguard.canary.observability.recording import (
    ACCEPTANCE_PER_POSITION,
    ACCEPTANCE_RATE,
    KV_CACHE_USAGE,
    MEAN_ACCEPTANCE_LENGTH,
    OUTPUT_TOKENS_RATE,
    PROXY_ERROR_RATIO,
    REQUESTS_WAITING,
    RecordingPlan,
    latency_record,
    latency_series,
)
from specguard.canary.spec.rollout import Rollout
from specguard.vllm.knowledge import version_text

__all__ = [
    "DASHBOARD_VERSION",
    "GRAFANA_SCHEMA_VERSION",
    "DashboardPin",
    "dashboard",
    "dashboard_pin",
    "dashboard_queries",
    "dashboard_uid",
]

GRAFANA_SCHEMA_VERSION = 39
DASHBOARD_VERSION = 2  # 2: the control pool in the panels (issue 28), uids with a hash suffix
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panels(plan: RecordingPlan) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(title, unit, [(expr, legend)]) of each panel, in order."""
    legend = "{{" + POOL_LABEL + "}}"
    pools = f'{POOL_LABEL}=~"{"|".join(plan.pools)}"'
    out: list[tuple[str, str, list[tuple[str, str]]]] = [
        (
            "Canary weight (% of new requests)",
            "percent",
            [("100 * specguard_canary_candidate_weight", "candidate"), ("100 * specguard_canary_control_weight", "control")],
        )
    ]
    for metric, title in (("itl_ms", "ITL (per engine step)"), ("ttft_ms", "TTFT"), ("e2e_ms", "E2E latency")):
        if latency_series(metric, plan.release) is None:
            continue
        queries = [(f"{latency_record(metric, p)}{{{pools}}}", f"{legend} {p}") for p in ("p50", "p99")]
        out.append((f"{title} P50 / P99", "s", queries))
    out += [
        ("Output tokens/s", "short", [(f"{OUTPUT_TOKENS_RATE}{{{pools}}}", legend)]),
        ("Requests waiting (per server)", "short", [(f"{REQUESTS_WAITING}{{{pools}}}", legend)]),
        ("KV-cache usage", "percentunit", [(f"{KV_CACHE_USAGE}{{{pools}}}", legend)]),
        (
            "Acceptance (candidate)",
            "percentunit",
            [
                (f'{ACCEPTANCE_RATE}{{{POOL_LABEL}="candidate"}}', "acceptance rate"),
                (f'{ACCEPTANCE_PER_POSITION}{{{POOL_LABEL}="candidate"}}', "position {{position}}"),
            ],
        ),
        (
            "Mean acceptance length (candidate)",
            "short",
            [(f'{MEAN_ACCEPTANCE_LENGTH}{{{POOL_LABEL}="candidate"}}', "tokens per draft step")],
        ),
    ]
    where = "at the proxy" if plan.error_ratio == PROXY_ERROR_RATIO else "at the engine"
    by = legend + (" {{segment}}" if plan.segment_label else "")
    if plan.error_ratio is not None:
        out.append((f"Errors {where}", "percentunit", [(f"{plan.error_ratio}{{{pools}}}", by)]))
    if plan.request_rate is not None:
        out.append((f"Requests/s {where}", "reqps", [(f"{plan.request_rate}{{{pools}}}", by)]))
    return out


def dashboard_queries(plan: RecordingPlan) -> list[str]:
    """Every PromQL expression the dashboard holds."""
    return [expr for _, _, queries in _panels(plan) for expr, _ in queries]


# Grafana's uid: at most 40 of [A-Za-z0-9_-]. The hash suffix keeps two rollouts whose names share a prefix
# (or differ only in characters a uid cannot hold) on two dashboards; 8 hex digits: 2^32 names.
_UID_MAX = 40
_UID_HASH = 8
_UID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def dashboard_uid(rollout_name: str) -> str:
    """The uid of the rollout's dashboard, unique per rollout name and valid in Grafana (at most 40 of
    ``[A-Za-z0-9_-]``): ``specguard-`` + the name (unsafe characters as ``-``, cut to fit) + ``-`` + 8 hex digits
    of its sha256. Annotations default to it."""
    suffix = hashlib.sha256(rollout_name.encode()).hexdigest()[:_UID_HASH]
    room = _UID_MAX - len("specguard-") - 1 - _UID_HASH
    readable = _UID_UNSAFE.sub("-", rollout_name)[:room].strip("-_")
    return f"specguard-{readable}-{suffix}" if readable else f"specguard-{suffix}"


@dataclass(frozen=True)
class DashboardPin:
    """Which dashboard, exactly: its uid, specguard's layout version and the sha256 of its canonical JSON."""

    uid: str
    version: int
    sha256: str

    def text(self) -> str:
        return f"dashboard {self.uid} v{self.version} sha256:{self.sha256[:12]}"


def dashboard_pin(doc: dict[str, Any]) -> DashboardPin:
    """The pin of a dashboard document: the hash is over sorted keys and no whitespace, so it does not
    depend on how the file was indented, only on what it says."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return DashboardPin(uid=str(doc["uid"]), version=int(doc["version"]), sha256=hashlib.sha256(canonical.encode()).hexdigest())


def dashboard(rollout: Rollout, plan: RecordingPlan) -> dict[str, Any]:
    """The dashboard JSON document (import it, or provision it from a file)."""
    panels = []
    for i, (title, unit, queries) in enumerate(_panels(plan)):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": _DATASOURCE,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [
                    {"refId": chr(ord("A") + j), "datasource": _DATASOURCE, "expr": expr, "legendFormat": legend}
                    for j, (expr, legend) in enumerate(queries)
                ],
            }
        )
    return {
        "uid": dashboard_uid(rollout.name),
        "title": f"specguard canary: {rollout.name}",
        "description": (
            f"Generated by specguard {__version__} for vLLM {version_text(plan.release)}; Grafana dashboard "
            f"schemaVersion {GRAFANA_SCHEMA_VERSION}. Needs recording-rules.yaml loaded and the '{POOL_LABEL}' "
            "target label on the vLLM servers' scrape jobs."
        ),
        "tags": ["specguard", "canary", f"vllm-{version_text(plan.release)}"],
        "schemaVersion": GRAFANA_SCHEMA_VERSION,
        "version": DASHBOARD_VERSION,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]},
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "panels": panels,
    }
