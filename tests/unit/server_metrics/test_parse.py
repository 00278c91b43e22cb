"""Parsing /metrics across vLLM versions and deriving acceptance as vLLM defines it."""

import pytest

from specguard.analysis.summarize import summarize
from specguard.server_metrics.parse import MetricsParseError, acceptance, has_spec_decode, parse_metrics_text

# As exposed by vLLM 0.32 (prometheus_client 0.26): counters end in _total, _created alongside.
NEW = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 1.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} {gen}
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} {stop}
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 2.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} {dt}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} {acc}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} {p1}
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="4096",engine="0"} 1.0
"""

# vLLM 0.9.x-0.10.x: the old KV-usage name, still emitted beside the new one until 0.12.
OLD = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="m"} 4.0
"""

# V0 (<=0.9.2 engine): spec decode as an acceptance gauge plus emitted-token counter.
V0 = """\
# TYPE vllm:spec_decode_draft_acceptance_rate gauge
vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.6
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 30.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 50.0
# TYPE vllm:spec_decode_num_emitted_tokens_total counter
vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 45.0
"""


def new(**kw):
    vals = dict(gen=100, stop=5, drafts=10, dt=40, acc=20, p0=8, p1=5) | kw
    text = NEW
    for k, v in vals.items():
        text = text.replace("{" + k + "}", f"{float(v)}")
    return text


def test_new_names():
    s = parse_metrics_text(new(), 1.0, "during")
    assert s.gauges == {"requests_running": 3.0, "requests_waiting": 2.0, "kv_cache_usage": 0.5}
    assert s.counters["preemptions"] == 1.0
    assert s.counters["spec_drafts"] == 10.0
    assert s.accepted_per_position == [8.0, 5.0]
    assert s.finished_by_reason == {"stop": 5.0, "length": 2.0}
    assert s.cache_config == {"block_size": "16", "num_gpu_blocks": "4096", "engine": "0"}
    assert s.names_seen["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert has_spec_decode(s)


def test_old_kv_name_is_mapped():
    s = parse_metrics_text(OLD, 0.0, "before")
    assert s.gauges["kv_cache_usage"] == 0.75
    assert s.names_seen["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert s.counters["preemptions"] == 4.0
    assert not has_spec_decode(s)


def test_new_name_wins_when_both_exposed():
    both = OLD + new()
    s = parse_metrics_text(both, 0.0, "before")
    assert s.gauges["kv_cache_usage"] == 0.5


def test_v0_spec_metrics():
    s = parse_metrics_text(V0, 0.0, "before")
    assert s.gauges["spec_acceptance_rate_v0"] == 0.6
    assert s.counters["spec_emitted_tokens_v0"] == 45.0
    assert has_spec_decode(s)


def test_counters_sum_over_engines_and_kv_usage_averages():
    two = new().replace('engine="0"', 'engine="1"')
    s = parse_metrics_text(new() + two.split("# TYPE vllm:cache_config_info")[0], 0.0, "during")
    assert s.counters["spec_drafts"] == 20.0
    assert s.gauges["kv_cache_usage"] == 0.5
    assert s.gauges["requests_running"] == 6.0


def test_acceptance_from_deltas_as_vllm_defines_it():
    before = parse_metrics_text(new(), 0.0, "before")
    after = parse_metrics_text(new(drafts=30, dt=120, acc=80, p0=26, p1=20), 5.0, "after")
    acc = acceptance(before, after)
    # 20 drafts, 80 draft tokens, 60 accepted
    assert acc.rate == pytest.approx(60 / 80)
    assert acc.mean_length == pytest.approx(1 + 60 / 20)
    assert acc.per_position == pytest.approx([18 / 20, 15 / 20])


def test_no_spec_counters_means_no_acceptance():
    a = parse_metrics_text(OLD, 0.0, "before")
    assert acceptance(a, a) is None


def test_unparsable_text_raises():
    with pytest.raises(MetricsParseError):
        parse_metrics_text("this is {not prometheus\n", 0.0, "during")


def test_foreign_traffic_is_reported():
    from tests.unit.analysis.test_request_metrics import _record

    recs = [_record(i, [0.1, 0.2], [1, 1]) for i in range(3)]
    before = parse_metrics_text(new(stop=0, gen=0), 0.0, "before")
    after = parse_metrics_text(new(stop=5, gen=10), 5.0, "after")
    s = summarize(recs, [before, after])
    assert any("foreign traffic" in w and "5 requests" in w for w in s.warnings)
    # exactly our own traffic: no warning
    after_ok = parse_metrics_text(new(stop=3, gen=6), 5.0, "after")
    assert not any("foreign" in w for w in summarize(recs, [before, after_ok]).warnings)
    # same request count but more tokens than ours
    after_tok = parse_metrics_text(new(stop=3, gen=50), 5.0, "after")
    assert any("generated 50 tokens" in w for w in summarize(recs, [before, after_tok]).warnings)
