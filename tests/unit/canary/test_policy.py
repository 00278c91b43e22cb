"""The rollout file translated for the analysis and the rule, and proxy records as analysis samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.canary.judge.policy import (
    analysis_policy,
    gauge_results,
    planned_looks,
    request_sample,
    rollout_rule,
    samples_by_segment,
)
from specguard.canary.spec.rollout import MetricBudget, Rollout, load_rollout
from specguard.canary.state.records import ProxiedRequest

ROOT = Path(__file__).resolve().parents[3]


def record(pool: str = "baseline", **kw: object) -> ProxiedRequest:
    base: dict[str, object] = {
        "seq": 0,
        "request_id": "r",
        "attempt": 1,
        "retried": False,
        "received_unix": 1.0,
        "pool": pool,
        "server": "http://127.0.0.1:1",
        "step": 0,
        "candidate_weight": 0.1,
        "segment": "m",
        "api": "completions",
        "stream": True,
        "in_flight": 3,
        "ok": True,
        "error": None,
        "http_status": 200,
        "ttft_s": 0.1,
        "e2e_s": 0.4,
        "stream_end_s": 0.41,
        "chunk_times_s": [0.1, 0.2, 0.4],
        "chunk_tokens": [1, 1, 2],
        "token_source": "server_usage",
        "prompt_tokens": 5,
        "output_tokens": 4,
        "finish_reason": "length",
    }
    return ProxiedRequest.model_validate(base | kw)


def test_the_embedded_example_translates() -> None:
    rollout = load_rollout(ROOT / "examples" / "rollout-embedded.yaml")
    policy = analysis_policy(rollout)
    assert [(r.metric, r.percentile, r.budget) for r in policy.metrics] == [
        ("itl_ms", 0.99, 0.10),
        ("e2e_ms", 0.99, 0.10),
        ("ttft_ms", 0.99, 0.10),
    ]
    assert policy.max_error_rate_increase == 0.005
    assert policy.alpha == rollout.analysis.false_rollback_rate
    rule = rollout_rule(rollout)
    assert [s.percent for s in rule.steps] == [s.percent for s in rollout.steps]
    assert [s.min_seconds for s in rule.steps] == [s.min_time_s for s in rollout.steps]
    assert rule.windows_to_rollback == rollout.analysis.rollback_windows


def test_planned_looks_cover_every_step_twice() -> None:
    r = Rollout.model_validate(
        {
            "pools": {"baseline": {"servers": ["http://127.0.0.1:1"]}, "candidate": {"servers": ["http://127.0.0.1:2"]}},
            "admin": {"token_env": "T"},
            "steps": [{"percent": 10, "min_time_s": 100}, {"percent": 100, "min_time_s": 10}],
            "analysis": {"window_s": 20, "promote_windows": 3},
        }
    )
    # step 1: ceil(100/20) = 5 windows; step 2: max(ceil(10/20), 3) = 3; twice the sum
    assert planned_looks(r) == 2 * (5 + 3)
    r.analysis.max_looks = 7
    assert planned_looks(r) == 7


def test_a_record_becomes_a_sample_with_bench_definitions() -> None:
    s = request_sample(record())
    assert s.in_flight == 3 and s.ok
    assert s.values["ttft_ms"] == [pytest.approx(100.0)]
    assert s.values["e2e_ms"] == [pytest.approx(400.0)]
    # per-token ITL: the 0.2 s gap before the 2-token chunk is two tokens of 100 ms each
    assert s.values["itl_ms"] == [pytest.approx(100.0), pytest.approx(100.0), pytest.approx(100.0)]
    assert s.values["tpot_ms"] == [pytest.approx(100.0)]  # (0.4 - 0.1) / (4 - 1)


def test_failed_and_abandoned_attempts() -> None:
    failed = record(pool="candidate", ok=False, error="HTTP 500", http_status=500, ttft_s=None, e2e_s=None, retried=True)
    gone = record(pool="candidate", client_disconnected=True)
    segments = samples_by_segment([record(), failed, gone], with_control=False)
    arms = segments["m"]
    assert len(arms.baseline) == 1 and arms.control is None
    assert len(arms.candidate) == 1, "the abandoned request counts for nothing"
    assert not arms.candidate[0].ok and arms.candidate[0].values == {}, "a failed attempt counts against its pool"


def test_gauges_compare_a_difference_against_the_margin() -> None:
    budgets = [MetricBudget(metric="requests_waiting", budget=2.0), MetricBudget(metric="kv_cache_usage", budget=0.1)]
    ok = gauge_results(
        budgets,
        {
            "baseline": {"requests_waiting": 1.0, "kv_cache_usage": 0.3},
            "candidate": {"requests_waiting": 2.5, "kv_cache_usage": 0.35},
        },
    )
    assert [r.verdict for r in ok] == ["PASS", "PASS"]
    bad = gauge_results(
        budgets,
        {
            "baseline": {"requests_waiting": 1.0, "kv_cache_usage": 0.3},
            "candidate": {"requests_waiting": 3.5, "kv_cache_usage": 0.45},
        },
    )
    assert [r.verdict for r in bad] == ["FAIL", "FAIL"]
    missing = gauge_results(budgets, {"baseline": {"requests_waiting": 1.0}, "candidate": {}})
    assert [r.verdict for r in missing] == ["INCONCLUSIVE", "INCONCLUSIVE"]
