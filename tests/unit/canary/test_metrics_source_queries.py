"""PrometheusSource's PromQL: the names each vLLM release exposes (server_metrics/names.py), by the pool label."""

from __future__ import annotations

from specguard.canary.evidence.metrics_source import pool_queries


def test_a_current_release_is_queried_by_its_new_names() -> None:
    q = pool_queries("candidate", (0, 32, 0))
    assert q[("bucket", "itl")] == 'sum by (le) (vllm:inter_token_latency_seconds_bucket{specguard_pool="candidate"})'
    assert q[("gauge", "kv_cache_usage")] == 'avg(avg by (instance) (vllm:kv_cache_usage_perc{specguard_pool="candidate"}))'
    assert q[("gauge", "requests_waiting")] == 'avg(sum by (instance) (vllm:num_requests_waiting{specguard_pool="candidate"}))'
    assert q[("counter", "spec_drafts")] == 'sum(vllm:spec_decode_num_drafts_total{specguard_pool="candidate"})'


def test_an_old_release_is_queried_by_the_names_it_exposed() -> None:
    q = pool_queries("baseline", (0, 9, 0))
    assert "vllm:time_per_output_token_seconds_bucket" in q[("bucket", "itl")]
    assert "vllm:gpu_cache_usage_perc" in q[("gauge", "kv_cache_usage")]
    # 0.9.0 had no request_time_per_output_token histogram yet (0.11.0).
    assert ("bucket", "tpot") not in q and ("count", "tpot") not in q
