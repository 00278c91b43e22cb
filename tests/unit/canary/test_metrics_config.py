"""The rollout file's ``metrics:`` key: scrape by default, prometheus validated, errors naming file, line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.canary.spec.metrics import PrometheusMetrics, ScrapeMetrics
from specguard.canary.spec.rollout import RolloutError, load_rollout
from tests.canary_harness import MINIMAL_ROLLOUT

PROMETHEUS = """\
metrics:
  source: prometheus
  url: http://127.0.0.1:9090
  token_env: PROM_TOKEN
  step_s: 5
  vllm_version: 0.32.0
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rollout.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def line_of(text: str, needle: str) -> int:
    return next(i + 1 for i, line in enumerate(text.splitlines()) if needle in line)


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(RolloutError) as err:
        load_rollout(write(tmp_path, text))
    return str(err.value)


@pytest.mark.parametrize("metrics", ["", "metrics: scrape\n", "metrics: {source: scrape}\n"])
def test_scraping_is_the_default_and_may_be_named(tmp_path: Path, metrics: str) -> None:
    assert isinstance(load_rollout(write(tmp_path, MINIMAL_ROLLOUT + metrics)).metrics, ScrapeMetrics)


def test_a_prometheus_source_loads_with_its_settings(tmp_path: Path) -> None:
    m = load_rollout(write(tmp_path, MINIMAL_ROLLOUT + PROMETHEUS)).metrics
    assert isinstance(m, PrometheusMetrics)
    assert (m.url, m.token_env, m.step_s, m.release) == ("http://127.0.0.1:9090", "PROM_TOKEN", 5.0, (0, 32, 0))


def test_prometheus_defaults_to_its_own_default_scrape_interval(tmp_path: Path) -> None:
    m = load_rollout(write(tmp_path, MINIMAL_ROLLOUT + "metrics: {source: prometheus, url: 'http://prom:9090'}\n")).metrics
    assert isinstance(m, PrometheusMetrics) and m.step_s == 15.0 and m.token_env is None and m.release is None


@pytest.mark.parametrize(
    ("bad", "key", "expected"),
    [
        ("url: ftp://prom:9090", "metrics.url", "expected http(s)://host[:port]"),
        ("url: http://user:pw@prom:9090", "metrics.url", "credentials do not go in a URL"),
        ("step_s: 0", "metrics.step_s", "greater than 0"),
        ("token_env: not-a-name", "metrics.token_env", "not an environment variable name"),
        ("vllm_version: latest", "metrics.vllm_version", "not a vLLM version"),
        ("bogus: 1", "metrics.bogus", "unknown key"),
    ],
)
def test_a_bad_prometheus_key_names_its_line_and_key(tmp_path: Path, bad: str, key: str, expected: str) -> None:
    field = bad.split(":")[0]
    doc = "\n".join(line for line in PROMETHEUS.splitlines() if not line.strip().startswith(field + ":")) + f"\n  {bad}\n"
    text = MINIMAL_ROLLOUT + doc
    msg = refused(tmp_path, text)
    # The union's tag is not part of the key path: the error points at the file's own line and key.
    assert f"rollout.yaml:{line_of(text, bad)}: key '{key}'" in msg and expected in msg, msg
    assert "prometheus." not in msg.split("key '")[1].split("'")[0]


def test_prometheus_without_a_url_is_refused_at_the_metrics_key(tmp_path: Path) -> None:
    text = MINIMAL_ROLLOUT + "metrics: prometheus\n"
    msg = refused(tmp_path, text)
    assert f"rollout.yaml:{line_of(text, 'metrics:')}: key 'metrics.url'" in msg and "Field required" in msg, msg


def test_an_unknown_source_is_refused_naming_the_sources(tmp_path: Path) -> None:
    text = MINIMAL_ROLLOUT + "metrics: {source: graphite}\n"
    msg = refused(tmp_path, text)
    assert f"rollout.yaml:{line_of(text, 'metrics:')}" in msg and "'scrape'" in msg and "'prometheus'" in msg, msg


def test_engine_responses_need_both_expressions_and_an_error_names_the_key(tmp_path: Path) -> None:
    text = MINIMAL_ROLLOUT + PROMETHEUS + "  engine_responses:\n    errors: 'sum by (specguard_pool) (x_5xx_total)'\n"
    message = refused(tmp_path, text)
    assert f":{line_of(text, 'engine_responses')}: key 'metrics.engine_responses.total'" in message, message
    full = text + "    total: 'sum by (specguard_pool) (x_total)'\n"
    metrics = load_rollout(write(tmp_path, full)).metrics
    assert isinstance(metrics, PrometheusMetrics) and metrics.engine_responses is not None
    assert metrics.engine_responses.total == "sum by (specguard_pool) (x_total)"
