"""``specguard canary observability``'s rules and dashboard, checked by promtool (the Debian package ``prometheus``).

``promtool check rules`` on every generated file; ``promtool test rules`` files written here drive each
alert through firing and not firing and each recording rule to the value computed here, in Python, from
the synthetic series (promtool 2.42 compares sample values exactly, so each check is a PromQL comparison
within 1e-9 that must come out 1). Metric names in the inputs are written out from vllm-facts.md section 3,
not taken from specguard's table, so a wrong table entry fails here. No Prometheus server is started.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from specguard.canary.observability import observability_files
from specguard.canary.observability.conventions import PROXY_JOB
from specguard.canary.observability.dashboard import GRAFANA_SCHEMA_VERSION, dashboard_queries
from specguard.canary.observability.recording import plan_recording
from specguard.canary.observability.rulefile import AlertingRule, RecordingRule, read_rule_file
from specguard.canary.spec.rollout import Rollout
from specguard.cli.app import app
from specguard.errors import ExitCode

STEPS = 40  # samples 15 s apart: ten minutes of series
EVAL = "10m"
BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, math.inf)
# Cumulative bucket counts added per scrape: the baseline, candidates far slower, just over and just within
# the default 10 % budget at P99.
BASELINE = (50.0, 90.0, 99.0, 100.0, 100.0, 100.0)
SLOW = (10.0, 40.0, 80.0, 95.0, 100.0, 100.0)
SLIGHTLY_SLOW = (50.0, 90.0, 98.9, 100.0, 100.0, 100.0)
JUST_OVER = (50.0, 90.0, 98.8, 100.0, 100.0, 100.0)
MIDDLING = (30.0, 70.0, 90.0, 99.5, 100.0, 100.0)
V032 = (0, 32, 0)
HAPROXY = {
    "type": "haproxy",
    "socket": "/run/haproxy/admin.sock",
    "backend": "vllm",
    "baseline_servers": ["base.1"],
    "candidate_servers": ["spec1", "spec2"],
}


def rollout(**overrides: Any) -> Rollout:
    doc: dict[str, Any] = {
        "name": "obs-test",
        "pools": {
            "baseline": {"servers": ["http://10.0.0.1:8000"]},
            "candidate": {"servers": [{"base_url": "http://10.0.0.2:8000", "metrics_url": "http://10.0.0.2:9000/m"}]},
        },
        "split": {"segment": {"source": "none"}},
        "admin": {"token_env": "T"},
    }
    doc.update(overrides)
    if "engine" in overrides:
        del doc["split"]  # an engine splits the traffic itself; the rollout refuses 'split' with one
    return Rollout.model_validate(doc)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not on PATH: install the Debian package 'prometheus' (apt-get install -y prometheus)")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def generate(tmp: Path, release: tuple[int, int, int] = V032, with_tests: bool = False, **overrides: Any) -> dict[str, Path]:
    paths = {}
    for name, text in observability_files(rollout(**overrides), release, with_tests=with_tests).items():
        (tmp / name).write_text(text)
        paths[name] = tmp / name
    return paths


def quantile(q: float, cumulative: tuple[float, ...]) -> float:
    """histogram_quantile as Prometheus interpolates it (linearly inside the bucket the rank falls in)."""
    rank = q * cumulative[-1]
    b = next(i for i, c in enumerate(cumulative) if c >= rank)
    if math.isinf(BOUNDS[b]):
        return BOUNDS[-2]
    lower, before = (0.0, 0.0) if b == 0 else (BOUNDS[b - 1], cumulative[b - 1])
    return lower + (BOUNDS[b] - lower) * (rank - before) / (cumulative[b] - before)


def labels(pairs: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def counter(name: str, per_scrape: float, **lbl: str) -> dict[str, str]:
    return {"series": f"{name}{labels(lbl)}", "values": f"0+{per_scrape}x{STEPS}"}


def gauge(name: str, value: float, **lbl: str) -> dict[str, str]:
    return {"series": f"{name}{labels(lbl)}", "values": f"{value}x{STEPS}"}


def histogram(base: str, cumulative: tuple[float, ...], **lbl: str) -> list[dict[str, str]]:
    out = []
    for bound, count in zip(BOUNDS, cumulative, strict=True):
        le = "+Inf" if math.isinf(bound) else f"{bound:g}"
        out.append(counter(f"{base}_bucket", count, **lbl, le=le))
    return out


def close_to(expr: str, expected: float) -> str:
    return f"abs(({expr}) - {expected!r}) <= bool {1e-9 * (1 + abs(expected))!r}"


def run_tests(tmp: Path, rule_files: list[str], tests: list[dict[str, Any]]) -> None:
    doc = {"rule_files": rule_files, "evaluation_interval": "15s", "tests": tests}
    (tmp / "tests.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=1_000_000))
    r = promtool("test", "rules", "tests.yaml", cwd=tmp)
    assert r.returncode == 0, r.stdout + r.stderr


def rules_of(path: Path) -> list[RecordingRule | AlertingRule]:
    return [rule for group in read_rule_file(path).groups for rule in group.rules]


# ---- promtool check ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", [(0, 7, 3), (0, 8, 4), (0, 9, 0), (0, 10, 1), (0, 11, 0), V032, (0, 33, 0)])
def test_promtool_accepts_every_generated_rule_file(tmp_path: Path, release: tuple[int, int, int]) -> None:
    paths = generate(tmp_path, release, split={"segment": {"source": "model"}})
    r = promtool("check", "rules", paths["recording-rules.yaml"].name, paths["alerting-rules.yaml"].name, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # The models read back what was written (the comments aside), so the files are the modelled format.
    assert all(rules_of(p) for p in (paths["recording-rules.yaml"], paths["alerting-rules.yaml"]))


def test_a_broken_rule_is_what_promtool_check_rejects(tmp_path: Path) -> None:
    paths = generate(tmp_path)
    text = paths["recording-rules.yaml"].read_text()
    paths["recording-rules.yaml"].write_text(text.replace("expr: histogram_quantile(0.99,", "expr: histogram_quantile(0.99,,", 1))
    assert promtool("check", "rules", "recording-rules.yaml", cwd=tmp_path).returncode != 0


# ---- recording rules to their values -----------------------------------------------------------------------

ITL, TTFT, E2E = "vllm:inter_token_latency_seconds", "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"


def test_each_recording_rule_records_the_value_its_formula_gives(tmp_path: Path) -> None:
    paths = generate(tmp_path)
    c0, c1 = {"specguard_pool": "candidate", "engine": "0"}, {"specguard_pool": "candidate", "engine": "1"}
    accepted, draft_tokens, drafts = (6.0, 2.0), (10.0, 10.0), (4.0, 4.0)
    per_pos = {"0": (3.0, 1.0), "1": (2.0, 1.0)}
    generation, waiting, kv = (30.0, 15.0), (3.0, 5.0), (0.2, 0.4)
    requests, errors = 30.0, 3.0
    series: list[dict[str, str]] = []
    for i, lbl in enumerate((c0, c1)):
        series += [
            counter("vllm:spec_decode_num_accepted_tokens_total", accepted[i], **lbl),
            counter("vllm:spec_decode_num_draft_tokens_total", draft_tokens[i], **lbl),
            counter("vllm:spec_decode_num_drafts_total", drafts[i], **lbl),
            counter("vllm:generation_tokens_total", generation[i], **lbl),
            gauge("vllm:num_requests_waiting", waiting[i], **lbl),
            gauge("vllm:kv_cache_usage_perc", kv[i], **lbl),
            *(counter("vllm:spec_decode_num_accepted_tokens_per_pos_total", v[i], **lbl, position=p) for p, v in per_pos.items()),
        ]
    latencies = (("itl", ITL, SLOW), ("ttft", TTFT, BASELINE), ("e2e", E2E, SLIGHTLY_SLOW), ("tpot", TPOT, MIDDLING))
    for _, base, dist in latencies:
        series += histogram(base, dist, specguard_pool="candidate", engine="0")
        series += histogram(base, dist, specguard_pool="candidate", engine="1")
    series += [
        counter("specguard_canary_requests_total", requests, pool="candidate", segment="default"),
        counter("specguard_canary_errors_total", errors, pool="candidate", segment="default"),
    ]
    cand = '{specguard_pool="candidate"}'
    expected: dict[str, list[tuple[str, float, dict[str, str]]]] = {
        "specguard_pool:vllm_spec_decode_acceptance_rate:ratio": [(cand, sum(accepted) / sum(draft_tokens), {})],
        "specguard_pool:vllm_spec_decode_mean_acceptance_length:ratio": [(cand, 1 + sum(accepted) / sum(drafts), {})],
        "specguard_pool:vllm_spec_decode_acceptance_per_position:ratio": [
            (f'{{specguard_pool="candidate", position="{p}"}}', sum(v) / sum(drafts), {"position": p}) for p, v in per_pos.items()
        ],
        "specguard_pool:vllm_generation_tokens:rate": [(cand, sum(generation) / 15, {})],
        "specguard_pool:vllm_num_requests_waiting:avg": [(cand, sum(waiting) / 2, {})],
        "specguard_pool:vllm_kv_cache_usage:avg": [(cand, sum(kv) / 2, {})],
        "specguard_pool:canary_proxy_requests:rate": [(cand, requests / 15, {"segment": "default"})],
        "specguard_pool:canary_proxy_errors:ratio": [(cand, errors / requests, {"segment": "default"})],
    }
    for kind, _, dist in latencies:
        for p in ("p50", "p99"):
            expected[f"specguard_pool:vllm_{kind}_seconds:{p}"] = [(cand, quantile(int(p[1:]) / 100, dist), {})]
    records = {r.record for r in rules_of(paths["recording-rules.yaml"]) if isinstance(r, RecordingRule)}
    assert records == set(expected), "every recording rule has an expected value here, and nothing else"
    checks = []
    for record, cases in expected.items():
        for selector, value, extra in cases:
            checks.append(
                {
                    "expr": close_to(record + selector, value),
                    "eval_time": EVAL,
                    "exp_samples": [{"labels": labels({"specguard_pool": "candidate", **extra}), "value": 1}],
                }
            )
    run_tests(tmp_path, ["recording-rules.yaml"], [{"interval": "15s", "input_series": series, "promql_expr_test": checks}])


def test_before_0_10_the_acceptance_rate_is_the_v0_gauge_where_a_server_exposes_it(tmp_path: Path) -> None:
    generate(tmp_path, (0, 9, 0))
    # The candidate runs the V0 engine (its gauge and its counters disagree); the control pool runs V1.
    series = [
        gauge("vllm:spec_decode_draft_acceptance_rate", 0.42, specguard_pool="candidate"),
        counter("vllm:spec_decode_num_accepted_tokens_total", 9.0, specguard_pool="candidate"),
        counter("vllm:spec_decode_num_draft_tokens_total", 10.0, specguard_pool="candidate"),
        counter("vllm:spec_decode_num_accepted_tokens_total", 3.0, specguard_pool="control"),
        counter("vllm:spec_decode_num_draft_tokens_total", 4.0, specguard_pool="control"),
    ]
    record = "specguard_pool:vllm_spec_decode_acceptance_rate:ratio"
    checks = [
        {
            "expr": close_to(f'{record}{{specguard_pool="{pool}"}}', value),
            "eval_time": EVAL,
            "exp_samples": [{"labels": labels({"specguard_pool": pool}), "value": 1}],
        }
        for pool, value in (("candidate", 0.42), ("control", 3.0 / 4.0))
    ]
    run_tests(tmp_path, ["recording-rules.yaml"], [{"interval": "15s", "input_series": series, "promql_expr_test": checks}])


def test_0_10_1_reads_itl_under_its_old_name_and_0_8_4_has_no_drafts_counter(tmp_path: Path) -> None:
    old = generate(tmp_path, (0, 10, 1))["recording-rules.yaml"].read_text()
    assert "vllm:time_per_output_token_seconds_bucket" in old and "vllm:inter_token_latency_seconds" not in old
    # Both KV names are exposed there (the old one until 0.11): the new one wins.
    assert "vllm:kv_cache_usage_perc" in old and "vllm:gpu_cache_usage_perc" not in old
    before_rename = observability_files(rollout(), (0, 9, 0))["recording-rules.yaml"]
    assert "avg by (specguard_pool) (vllm:gpu_cache_usage_perc)" in before_rename
    series = histogram("vllm:time_per_output_token_seconds", SLOW, specguard_pool="baseline")
    check = {
        "expr": close_to('specguard_pool:vllm_itl_seconds:p99{specguard_pool="baseline"}', quantile(0.99, SLOW)),
        "eval_time": EVAL,
        "exp_samples": [{"labels": labels({"specguard_pool": "baseline"}), "value": 1}],
    }
    run_tests(tmp_path, ["recording-rules.yaml"], [{"interval": "15s", "input_series": series, "promql_expr_test": [check]}])
    early = observability_files(rollout(), (0, 8, 4))["recording-rules.yaml"]
    assert "mean_acceptance_length" not in early and "vllm:spec_decode_num_drafts_total" not in early.split("groups:")[1]
    assert "Left out" in early and "num_drafts" in early.split("groups:")[0]


# ---- each alert through firing and not firing --------------------------------------------------------------


def _alert_scenarios() -> dict[str, tuple[list[dict[str, str]], list[dict[str, str]], dict[str, str]]]:
    """alert -> (series that fire it, series that do not, the labels of the firing alert from the series)."""
    cand, base = {"specguard_pool": "candidate"}, {"specguard_pool": "baseline"}
    out: dict[str, tuple[list[dict[str, str]], list[dict[str, str]], dict[str, str]]] = {}
    # SLIGHTLY_SLOW is within the 10 % budget at P99, JUST_OVER is not (by under 20 %): say so before relying on it.
    assert quantile(0.99, SLIGHTLY_SLOW) < 1.10 * quantile(0.99, BASELINE) < quantile(0.99, JUST_OVER)
    assert quantile(0.99, JUST_OVER) < 1.20 * quantile(0.99, BASELINE)
    for name, base_name in (("Ttft", TTFT), ("E2e", E2E)):
        baseline = histogram(base_name, BASELINE, **base)
        out[f"SpecguardCandidate{name}P99Regression"] = (
            baseline + histogram(base_name, JUST_OVER, **cand),
            baseline + histogram(base_name, SLIGHTLY_SLOW, **cand),
            cand,
        )
    # The per-token (itl_ms) budget reads TPOT (issue 28): a candidate far slower per engine step (vLLM's ITL
    # histogram) but within budget per output token does not fire it; one over budget per token does.
    per_step = histogram(ITL, BASELINE, **base) + histogram(ITL, SLOW, **cand)
    baseline = histogram(TPOT, BASELINE, **base)
    out["SpecguardCandidateItlP99Regression"] = (
        baseline + histogram(TPOT, JUST_OVER, **cand),
        per_step + baseline + histogram(TPOT, SLIGHTLY_SLOW, **cand),
        cand,
    )
    for name, metric, base_value, over, under in (
        ("RequestsWaiting", "vllm:num_requests_waiting", 1.0, 3.5, 2.5),  # budget 2
        ("KvCacheUsage", "vllm:kv_cache_usage_perc", 0.5, 0.65, 0.55),  # budget 0.10
    ):
        out[f"SpecguardCandidate{name}Regression"] = (
            [gauge(metric, base_value, **base), gauge(metric, over, **cand)],
            [gauge(metric, base_value, **base), gauge(metric, under, **cand)],
            cand,
        )

    def proxy(candidate_errors: float) -> list[dict[str, str]]:  # 100 requests a scrape each; budget 0.005
        return [
            counter("specguard_canary_requests_total", 100.0, pool="baseline", segment="chat"),
            counter("specguard_canary_errors_total", 0.1, pool="baseline", segment="chat"),
            counter("specguard_canary_requests_total", 100.0, pool="candidate", segment="chat"),
            counter("specguard_canary_errors_total", candidate_errors, pool="candidate", segment="chat"),
        ]

    out["SpecguardCandidateErrorRateRegression"] = (proxy(1.0), proxy(0.4), {**cand, "segment": "chat"})
    target = {"job": "vllm-candidate", "instance": "10.0.0.2:9000", **cand}
    out["SpecguardPoolServerDown"] = (
        [{"series": f"up{labels(target)}", "values": f"1x10 0x{STEPS - 10}"}],
        [{"series": f"up{labels(target)}", "values": f"1x{STEPS}"}],
        target,
    )
    out["SpecguardPoolServerRestarted"] = (
        [{"series": f"process_start_time_seconds{labels(target)}", "values": f"1000x30 1600x{STEPS - 30}"}],
        [{"series": f"process_start_time_seconds{labels(target)}", "values": f"1000x{STEPS}"}],
        target,
    )
    out["SpecguardPoolPreempting"] = (
        [counter("vllm:num_preemptions_total", 1.0, **target)],
        [counter("vllm:num_preemptions_total", 0.0, **target)],
        cand,
    )

    def acceptance(accepted: float) -> list[dict[str, str]]:
        return [
            counter("vllm:spec_decode_num_accepted_tokens_total", accepted, **cand),
            counter("vllm:spec_decode_num_draft_tokens_total", 10.0, **cand),
        ]

    out["SpecguardCandidateAcceptanceLow"] = (acceptance(3.0), acceptance(7.0), cand)
    # The controller's own series on its admin API (control.series): scraped as the proxy job in every mode.
    admin = {"job": PROXY_JOB, "instance": "127.0.0.1:9091"}
    out["SpecguardControllerDown"] = (
        [{"series": f"up{labels(admin)}", "values": f"1x10 0x{STEPS - 10}"}],
        [{"series": f"up{labels(admin)}", "values": f"1x{STEPS}"}],
        admin,
    )
    for alert, name, kind in (
        ("SpecguardCanaryRolledBack", "specguard_canary_decisions_total", "rollback"),
        ("SpecguardEngineDrift", "specguard_canary_events_total", "drift"),
    ):
        other = {**admin, "kind": "hold" if kind == "rollback" else "window"}
        out[alert] = (
            [{"series": f"{name}{labels({**admin, 'kind': kind})}", "values": f"0x30 1x{STEPS - 30}"}],
            [{"series": f"{name}{labels(other)}", "values": f"0+1x{STEPS}"}],
            {**admin, "kind": kind},
        )
    return out


def rendered(annotations: dict[str, str], series_labels: dict[str, str]) -> dict[str, str]:
    """The annotations as Prometheus renders them for an alert with these labels (the pool's template)."""
    pool = series_labels.get("specguard_pool", "")
    return {k: v.replace("{{ $labels.specguard_pool }}", pool) for k, v in annotations.items()}


def test_each_alert_fires_on_a_regression_and_stays_quiet_within_budget(tmp_path: Path) -> None:
    paths = generate(tmp_path)
    alerts = {r.alert: r for r in rules_of(paths["alerting-rules.yaml"]) if isinstance(r, AlertingRule)}
    scenarios = _alert_scenarios()
    assert set(alerts) == set(scenarios), "every alert is driven here, and nothing else"
    tests = []
    for name, (firing, quiet, series_labels) in scenarios.items():
        rule = alerts[name]
        fired = {"exp_labels": {**series_labels, **rule.labels}, "exp_annotations": rendered(rule.annotations, series_labels)}
        assert rule.annotations["runbook_url"].startswith("RUNBOOK.md#") and "obs-test" in rule.annotations["summary"]
        for series, exp in ((firing, [fired]), (quiet, [])):
            test = {"alertname": name, "eval_time": EVAL, "exp_alerts": exp}
            # Packed into the first test with none of these series: promtool starts over for each test (~0.1 s),
            # and checks each alert by name, so one alert's series do not disturb another's check.
            same = [t for t in tests if t["firing"] == bool(exp) and not {x["series"] for x in series} & t["names"]]
            if same:
                same[0]["input_series"] += series
                same[0]["alert_rule_test"].append(test)
                same[0]["names"] |= {x["series"] for x in series}
            else:
                tests.append(
                    {
                        "interval": "15s",
                        "input_series": list(series),
                        "alert_rule_test": [test],
                        "firing": bool(exp),
                        "names": {x["series"] for x in series},
                    }
                )
    for t in tests:
        del t["firing"], t["names"]
    # Down from 150 s on, held for one window (60 s): pending, not firing, at 180 s.
    down = scenarios["SpecguardPoolServerDown"][0]
    pending = {"alertname": "SpecguardPoolServerDown", "eval_time": "180s", "exp_alerts": []}
    tests.append({"interval": "15s", "input_series": down, "alert_rule_test": [pending]})
    run_tests(tmp_path, ["recording-rules.yaml", "alerting-rules.yaml"], tests)


def test_a_restart_shows_as_a_counter_reset_where_no_process_metrics_are_exported(tmp_path: Path) -> None:
    paths = generate(tmp_path)
    rule = next(
        r for r in rules_of(paths["alerting-rules.yaml"]) if isinstance(r, AlertingRule) and r.alert.endswith("Restarted")
    )
    target = {"job": "vllm-candidate", "instance": "10.0.0.2:9000", "specguard_pool": "candidate"}
    series = [{"series": f"vllm:prompt_tokens_total{labels(target)}", "values": "0+50x30 0+50x9"}]
    fired = {"exp_labels": {**target, **rule.labels}, "exp_annotations": rendered(rule.annotations, target)}
    test = {"alertname": rule.alert, "eval_time": EVAL, "exp_alerts": [fired]}
    run_tests(tmp_path, ["alerting-rules.yaml"], [{"interval": "15s", "input_series": series, "alert_rule_test": [test]}])


def test_budget_alerts_follow_the_rollouts_budgets_and_hold_for_its_rollback_windows() -> None:
    analysis = {
        "window_s": 90,
        "rollback_windows": 3,
        "metrics": [
            {"metric": "ttft_ms", "percentile": "p95", "budget": 0.25},
            {"metric": "tpot_ms", "percentile": "p99", "budget": 0.2},
        ],
    }
    text = observability_files(rollout(analysis=analysis), V032)["alerting-rules.yaml"]
    doc = yaml.safe_load(text)
    alerts = {r["alert"]: r for r in doc["groups"][0]["rules"]}
    assert {"SpecguardCandidateTtftP95Regression", "SpecguardCandidateTpotP99Regression"} <= set(alerts)
    assert not any(a.startswith("SpecguardCandidateItl") for a in alerts)
    ttft = alerts["SpecguardCandidateTtftP95Regression"]
    assert ttft["for"] == "270s" and "1.25 * specguard_pool:vllm_ttft_seconds:p95" in ttft["expr"]
    assert "vllm:request_time_per_output_token_seconds" in alerts["SpecguardCandidateTpotP99Regression"]["annotations"]["formula"]


def test_with_model_segments_server_rules_keep_the_model_name() -> None:
    text = observability_files(rollout(split={"segment": {"source": "model"}}), V032)["recording-rules.yaml"]
    assert "by (specguard_pool, model_name, le)" in text and "by (specguard_pool, model_name)" in text


def test_every_rule_says_its_formula_and_releases() -> None:
    files = observability_files(rollout(), V032)
    rec = files["recording-rules.yaml"].split("groups:", 1)[1]
    for comment, _ in re.findall(r"((?:      #.*\n)+)      - (record): ", rec):
        assert "applies to" in comment or "Any vLLM release" in comment or "proxy" in comment
    assert rec.count("- record:") == len(re.findall(r"((?:      #.*\n)+)      - record: ", rec))
    for rule in yaml.safe_load(files["alerting-rules.yaml"])["groups"][0]["rules"]:
        assert rule["annotations"]["formula"] and rule["annotations"]["vllm_releases"]
    header = files["recording-rules.yaml"].split("groups:", 1)[0]
    assert "specguard_pool: candidate" in header and '"10.0.0.2:9000"' in header and "metrics_path: /m" in header


# ---- the dashboard -----------------------------------------------------------------------------------------


def test_dashboard_queries_are_promql_promtool_accepts_and_read_recorded_or_proxy_series(tmp_path: Path) -> None:
    files = observability_files(rollout(), V032)
    board = json.loads(files["dashboard.json"])
    assert board["schemaVersion"] == GRAFANA_SCHEMA_VERSION and str(GRAFANA_SCHEMA_VERSION) in board["description"]
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert exprs == dashboard_queries(plan_recording(rollout(), V032))
    titles = " ".join(p["title"] for p in board["panels"])
    for panel in ("weight", "ITL", "TTFT", "E2E", "tokens/s", "waiting", "KV", "Acceptance", "Errors"):
        assert panel in titles
    assert 'specguard_pool=~"baseline|candidate"}' in exprs[2] and not any('control"' in e for e in exprs)
    pools = {**rollout().model_dump(exclude_defaults=True)["pools"], "control": {"servers": ["http://10.0.0.3:8000"]}}
    with_control = dashboard_queries(plan_recording(rollout(pools=pools), V032))
    assert sum('specguard_pool=~"baseline|candidate|control"}' in e for e in with_control) >= 5, with_control
    doc = {
        "groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]
    }
    (tmp_path / "queries.yaml").write_text(yaml.safe_dump(doc))
    r = promtool("check", "rules", "queries.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "recording-rules.yaml").write_text(files["recording-rules.yaml"])
    recorded = {r.record for r in rules_of(tmp_path / "recording-rules.yaml") if isinstance(r, RecordingRule)}
    for expr in exprs:
        name = re.match(r"(?:100 \* )?([a-zA-Z0-9_:]+)", expr)
        assert name and (name.group(1) in recorded or name.group(1).startswith("specguard_canary_")), expr


# ---- the command -------------------------------------------------------------------------------------------


def write_rollout_file(tmp: Path) -> Path:
    path = tmp / "rollout.yaml"
    doc = rollout().model_dump(exclude_defaults=True)
    path.write_text(yaml.safe_dump({**doc, "admin": {"token_env": "T"}}))
    return path


def test_the_command_writes_the_three_files_promtool_accepts(tmp_path: Path) -> None:
    out = tmp_path / "obs"
    r = CliRunner().invoke(
        app, ["canary", "observability", str(write_rollout_file(tmp_path)), "--vllm-version", "0.32.0+cpu", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["alerting-rules.yaml", "dashboard.json", "recording-rules.yaml"]
    assert promtool("check", "rules", "recording-rules.yaml", "alerting-rules.yaml", cwd=out).returncode == 0
    assert json.loads((out / "dashboard.json").read_text())["schemaVersion"] == GRAFANA_SCHEMA_VERSION
    again = CliRunner().invoke(
        app, ["canary", "observability", str(tmp_path / "rollout.yaml"), "--vllm-version", "0.32.0", "--out", str(out)]
    )
    assert again.exit_code == ExitCode.USAGE and "--force" in again.output


def test_with_tests_the_command_ships_promtool_tests_that_drive_every_alert_both_ways(tmp_path: Path) -> None:
    # Behind HAProxy: test_behind_haproxy_the_error_alert_and_panels_read_haproxys_response_counters runs them.
    out = tmp_path / "obs"
    source = write_rollout_file(tmp_path)
    args = ["canary", "observability", str(source), "--vllm-version", "0.32.0", "--out", str(out), "--with-tests"]
    r = CliRunner().invoke(app, [*args, "--runbook-url", "https://git.example/ops/RUNBOOK.md"])
    assert r.exit_code == 0, r.output
    alerts = [r for r in rules_of(out / "alerting-rules.yaml") if isinstance(r, AlertingRule)]
    assert all(a.annotations["runbook_url"].startswith("https://git.example/ops/RUNBOOK.md#") for a in alerts)
    doc = yaml.safe_load((out / "rules-test.yaml").read_text())
    checks = [(c["alertname"], bool(c["exp_alerts"])) for t in doc["tests"] for c in t["alert_rule_test"]]
    assert sorted(checks) == sorted((a.alert, fires) for a in alerts for fires in (True, False)), "each alert both ways"
    result = promtool("test", "rules", "rules-test.yaml", cwd=out)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("option", "value"),
    [("--vllm-version", "abc"), ("--vllm-version", "0.x"), ("--vllm-version", ""), ("--runbook-url", "a b#c")],
)
def test_the_command_rejects_a_bad_option_and_writes_nothing(tmp_path: Path, option: str, value: str) -> None:
    out = tmp_path / "obs"
    args = ["canary", "observability", str(write_rollout_file(tmp_path)), "--vllm-version", "0.32.0", "--out", str(out)]
    r = CliRunner().invoke(app, [*args, option, value])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert option in r.output and not out.exists()


# ---- behind an engine: the error rate from the engine's counters -----------------------------------------


def test_behind_haproxy_the_error_alert_and_panels_read_haproxys_response_counters(tmp_path: Path) -> None:
    paths = generate(tmp_path, engine=HAPROXY, with_tests=True)
    recording = paths["recording-rules.yaml"].read_text()
    assert "specguard_canary_errors_total" not in recording, "no proxy runs: its series are never exported"
    board = paths["dashboard.json"].read_text()
    assert "canary_engine_errors:ratio" in board and "canary_proxy" not in board
    alert = next(r for r in rules_of(paths["alerting-rules.yaml"]) if isinstance(r, AlertingRule) and "ErrorRate" in r.alert)

    def responses(candidate_5xx: float) -> list[dict[str, str]]:  # 100 responses a scrape per server; budget 0.005
        out = []
        for server, five in (("base.1", 0.1), ("spec1", candidate_5xx), ("spec2", 0.0)):
            out.append(counter("haproxy_server_http_responses_total", 100.0 - five, proxy="vllm", server=server, code="2xx"))
            out.append(counter("haproxy_server_http_responses_total", five, proxy="vllm", server=server, code="5xx"))
        # A server of the same name in another backend, and one whose name the unescaped '.' would match: not counted.
        out.append(counter("haproxy_server_http_responses_total", 50.0, proxy="other", server="spec1", code="5xx"))
        out.append(counter("haproxy_server_http_responses_total", 50.0, proxy="vllm", server="baseX1", code="5xx"))
        return out

    cand = {"specguard_pool": "candidate"}
    fired = {"exp_labels": {**cand, **alert.labels}, "exp_annotations": alert.annotations}
    tests = [
        # Candidate: 2.0 of 200 responses a scrape are 5xx (1 %), the baseline 0.1 %: over the 0.5-point budget.
        {
            "interval": "15s",
            "input_series": responses(2.0),
            "alert_rule_test": [{"alertname": alert.alert, "eval_time": EVAL, "exp_alerts": [fired]}],
        },
        # 0.8 of 200 (0.4 %): within it.
        {
            "interval": "15s",
            "input_series": responses(0.8),
            "alert_rule_test": [{"alertname": alert.alert, "eval_time": EVAL, "exp_alerts": []}],
        },
    ]
    # And the shipped rules-test.yaml for this engine, in the same promtool run: every alert both ways.
    shipped = yaml.safe_load(paths["rules-test.yaml"].read_text())["tests"]
    checks = [(c["alertname"], bool(c["exp_alerts"])) for t in shipped for c in t["alert_rule_test"]]
    alerts = [r.alert for r in rules_of(paths["alerting-rules.yaml"]) if isinstance(r, AlertingRule)]
    assert sorted(checks) == sorted((a, fires) for a in alerts for fires in (True, False))
    run_tests(tmp_path, ["recording-rules.yaml", "alerting-rules.yaml"], tests + shipped)


def test_behind_a_gateway_the_error_rate_is_the_operators_engine_responses_or_left_out(tmp_path: Path) -> None:
    gateway = {
        "type": "gateway-api",
        "route": "llama-canary",
        "namespace": "inference",
        "gateway": {"name": "inference-gateway", "namespace": "gateways"},
        "backends": {
            "baseline": {"kind": "Service", "name": "b", "port": 8000},
            "candidate": {"kind": "Service", "name": "c", "port": 8000},
        },
    }
    errors = 'sum by (specguard_pool) (label_replace(envoy_rq_total{code=~"5.."}, "specguard_pool", "$1", "cluster", "(.*)"))'
    total = 'sum by (specguard_pool) (label_replace(envoy_rq_total, "specguard_pool", "$1", "cluster", "(.*)"))'
    metrics = {"source": "prometheus", "url": "http://127.0.0.1:9090", "engine_responses": {"errors": errors, "total": total}}
    paths = generate(tmp_path, engine=gateway, metrics=metrics)
    assert f"rate(({errors})[60s:])" in paths["recording-rules.yaml"].read_text()  # promtool test loads (checks) the files
    alert = next(r for r in rules_of(paths["alerting-rules.yaml"]) if isinstance(r, AlertingRule) and "ErrorRate" in r.alert)

    def rq(candidate_5xx: float) -> list[dict[str, str]]:
        return [
            counter("envoy_rq_total", 99.9, cluster="baseline", code="200"),
            counter("envoy_rq_total", 0.1, cluster="baseline", code="503"),
            counter("envoy_rq_total", 100.0 - candidate_5xx, cluster="candidate", code="200"),
            counter("envoy_rq_total", candidate_5xx, cluster="candidate", code="503"),
        ]

    fired = {"exp_labels": {"specguard_pool": "candidate", **alert.labels}, "exp_annotations": alert.annotations}
    tests = [
        {
            "interval": "15s",
            "input_series": rq(1.0),
            "alert_rule_test": [{"alertname": alert.alert, "eval_time": EVAL, "exp_alerts": [fired]}],
        },
        {
            "interval": "15s",
            "input_series": rq(0.4),
            "alert_rule_test": [{"alertname": alert.alert, "eval_time": EVAL, "exp_alerts": []}],
        },
    ]
    run_tests(tmp_path, ["recording-rules.yaml", "alerting-rules.yaml"], tests)
    # Without engine_responses there is nothing to read the errors from: no error alert, and the files say so.
    files = observability_files(rollout(engine=gateway), V032)
    assert "ErrorRate" not in files["alerting-rules.yaml"] and "metrics.engine_responses" in files["recording-rules.yaml"]
