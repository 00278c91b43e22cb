"""The rollout file: defaults, the rules on steps, hooks and the admin API, and errors that name file, line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.analysis.definitions import METRIC_DEFINITIONS
from specguard.canary.control.admin import admin_ssl_context, read_token, remote_without_tls_warning
from specguard.canary.spec.rollout import (
    DEFAULT_STEPS,
    LATENCY_METRICS,
    POOL_GAUGES,
    Pool,
    Rollout,
    RolloutError,
    is_loopback,
    load_rollout,
    split_listen,
)
from specguard.errors import ExitCode, InputFileError, OptionError
from specguard.server_metrics.names import GAUGES
from specguard.vllm.server_spec import LaunchSpec
from tests.canary_harness import MINIMAL_ROLLOUT

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

MINIMAL = MINIMAL_ROLLOUT


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rollout.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def load_with(tmp_path: Path, extra: str) -> Rollout:
    return load_rollout(write(tmp_path, MINIMAL + textwrap.dedent(extra)))


def test_the_defaults_are_the_issues() -> None:
    r = Rollout.model_validate(
        {
            "pools": {"baseline": {"servers": ["http://a:1"]}, "candidate": {"servers": ["http://b:1"]}},
            "admin": {"token_env": "T"},
        }
    )
    assert [s.percent for s in r.steps] == [1, 5, 10, 25, 50, 100] == list(DEFAULT_STEPS)
    assert all(s.min_time_s > 0 and s.min_requests > 0 for s in r.steps)
    assert r.analysis.window_s == 60
    assert (r.analysis.rollback_windows, r.analysis.promote_windows) == (2, 3)
    budgets = {m.key: (m.budget, m.comparison, m.direction) for m in r.analysis.metrics}
    assert budgets["itl_ms.p99"] == budgets["e2e_ms.p99"] == budgets["ttft_ms.p99"] == (0.10, "ratio", "lower_is_better")
    assert budgets["error_rate"] == (0.005, "difference", "lower_is_better")
    assert {"requests_waiting", "kv_cache_usage"} <= budgets.keys()
    assert r.listen == "127.0.0.1:8080"
    assert is_loopback(split_listen(r.admin.listen)[0])
    assert r.split.sticky.source == "user" and r.split.segment.source == "model"
    assert r.pools.control is None and r.hooks.rollback == []


def test_metric_names_are_benchs_and_the_scrapers() -> None:
    # A canary's per-token ITL must mean exactly what a check's does: the names are the shared definitions'.
    assert set(LATENCY_METRICS) | {"error_rate"} <= METRIC_DEFINITIONS.keys()
    assert set(POOL_GAUGES) <= GAUGES.keys()


def test_a_pool_can_be_launched_with_the_check_plans_spec(tmp_path: Path) -> None:
    r = load_rollout(
        write(
            tmp_path,
            """\
            pools:
              baseline: {launch: {model: "embedded:target"}}
              candidate:
                launch: {model: "embedded:target", speculative_config: {method: ngram, num_speculative_tokens: 4}}
            admin: {token_file: token.txt}
            """,
        )
    )
    assert isinstance(r.pools.candidate.launch, LaunchSpec)
    assert r.pools.candidate.launch.speculative_config == {"method": "ngram", "num_speculative_tokens": 4}
    assert r.admin.token_file == str((tmp_path / "token.txt").resolve())


def test_servers_take_a_url_or_a_url_with_its_metrics_url(tmp_path: Path) -> None:
    r = load_rollout(
        write(
            tmp_path,
            """\
            pools:
              baseline:
                servers: ["http://a:8000", {base_url: "http://b:8000", metrics_url: "http://b:9000/metrics"}]
              candidate: {servers: ["http://c:8000"]}
            admin: {token_env: T}
            """,
        )
    )
    assert [(s.base_url, s.metrics_url) for s in r.pools.baseline.servers] == [
        ("http://a:8000", None),
        ("http://b:8000", "http://b:9000/metrics"),
    ]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("[5, 1, 100]", "strictly increasing"),
        ("[1, 5, 5, 100]", "strictly increasing"),
        ("[1, 5, 50]", "last step must be 100"),
        ("[0, 50, 100]", "greater than 0"),
        ("[1, 101]", "less than or equal to 100"),
        ("[]", "at least 1"),
    ],
)
def test_bad_steps_are_refused_naming_the_line_and_key(tmp_path: Path, steps: str, message: str) -> None:
    with pytest.raises(RolloutError, match=message) as err:
        load_with(tmp_path, f"steps: {steps}\n")
    assert f"{tmp_path / 'rollout.yaml'}:8: key 'steps" in str(err.value)


def test_steps_take_minimums(tmp_path: Path) -> None:
    r = load_with(tmp_path, "steps: [{percent: 2.5, min_time_s: 30, min_requests: 10}, 100]\n")
    assert [(s.percent, s.min_time_s, s.min_requests) for s in r.steps][0] == (2.5, 30, 10)
    assert r.steps[1].percent == 100


@pytest.mark.parametrize(
    "hook",
    [
        '"systemctl stop vllm-target-speculative.service"',
        '["systemctl stop vllm-target-speculative.service"]',
        '[["systemctl stop x"]]',
    ],
)
def test_a_shell_string_hook_is_refused(tmp_path: Path, hook: str) -> None:
    with pytest.raises(RolloutError, match="argument lists only, never a shell") as err:
        load_with(tmp_path, f"hooks:\n  rollback: {hook}\n")
    assert ":9: key 'hooks.rollback" in str(err.value)


def test_hooks_are_argument_lists_kept_literally(tmp_path: Path) -> None:
    r = load_with(
        tmp_path,
        """\
        hooks:
          rollback:
            - [systemctl, stop, vllm-target-speculative.service]
            - [echo, "$(rm -rf /); `x` | y > z"]
          promote: [systemctl, enable, vllm-target-speculative.service]
          timeout_s: 30
        """,
    )
    assert r.hooks.rollback == [["systemctl", "stop", "vllm-target-speculative.service"], ["echo", "$(rm -rf /); `x` | y > z"]]
    assert r.hooks.promote == [["systemctl", "enable", "vllm-target-speculative.service"]]
    assert r.hooks.timeout_s == 30


@pytest.mark.parametrize(
    ("admin", "message"),
    [
        ("{listen: '0.0.0.0:8081', token_env: T}", "not a loopback address"),
        ("{listen: 'canary.example.com:8081', token_env: T}", "not a loopback address"),
        ("{listen: '127.0.0.1:8081'}", "exactly one of 'token_env' or 'token_file'"),
        ("{token_env: T, token_file: t.txt}", "exactly one of 'token_env' or 'token_file'"),
        ("{token_env: 'NOT A NAME'}", "environment variable name"),
        ("{listen: '127.0.0.1', token_env: T}", "host:port"),
        ("{listen: '127.0.0.1:8080', token_env: T}", "cannot both listen"),
    ],
)
def test_the_admin_api_is_loopback_and_token_protected_unless_said_otherwise(tmp_path: Path, admin: str, message: str) -> None:
    base = MINIMAL.replace("admin:\n  token_env: CANARY_TOKEN\n", "")
    with pytest.raises(RolloutError, match=message):
        load_rollout(write(tmp_path, base + f"admin: {admin}\n"))


def test_a_remote_admin_address_is_allowed_when_explicitly_set(tmp_path: Path) -> None:
    base = MINIMAL.replace("admin:\n  token_env: CANARY_TOKEN\n", "")
    r = load_rollout(write(tmp_path, base + "admin: {listen: '0.0.0.0:8081', allow_remote: true, token_env: T}\n"))
    assert r.admin.listen == "0.0.0.0:8081"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_split_listen_reads_ipv6_in_brackets() -> None:
    assert split_listen("[::1]:8081") == ("::1", 8081)
    with pytest.raises(ValueError, match="brackets"):
        split_listen("::1:8081")
    with pytest.raises(ValueError, match="1-65535"):
        split_listen("127.0.0.1:70000")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("split: {sticky: {source: header}}\n", "'header' is given exactly when source is 'header'"),
        ("split: {sticky: {source: header, header: 'bad header'}}\n", "not an HTTP header name"),
        ("split: {segment: {source: rules}}\n", "'rules'"),
        ("split: {segment: {source: rules, rules: [{name: c, pattern: '('}]}}\n", "bad regular expression"),
        ("analysis: {metrics: [{metric: itl_ms, budget: 0.1}]}\n", "needs a percentile"),
        ("analysis: {metrics: [{metric: error_rate, percentile: p99, budget: 0.1}]}\n", "has no percentile"),
        ("analysis: {metrics: [{metric: error_rate, budget: 0.1, comparison: ratio}]}\n", "compared as a difference"),
        (
            "analysis: {metrics: [{metric: e2e_ms, percentile: p99, budget: 0.1},"
            " {metric: e2e_ms, percentile: p99, budget: 0.2}]}\n",
            "once",
        ),
        ("analysis: {window_s: .nan}\n", "finite"),
        ("analysis: {rollback_windows: 0}\n", "greater than or equal to 1"),
        ("analysis: {critical: {http_5xx_burst: {count: 0, within_s: 10}}}\n", "greater than or equal to 1"),
    ],
)
def test_bad_split_and_analysis_keys_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(RolloutError, match=message):
        load_with(tmp_path, extra)


def test_sticky_header_names_are_kept_lower_case(tmp_path: Path) -> None:
    r = load_with(tmp_path, "split: {sticky: {source: header, header: X-User-Id}}\n")
    assert r.split.sticky.header == "x-user-id"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "pools:\n  baseline: {servers: ['http://a:1']}\n  candidate: {servers: ['http://a:1']}\nadmin: {token_env: T}\n",
            "in both the baseline and the candidate pool",
        ),
        ("pools:\n  baseline: {}\n  candidate: {servers: ['http://a:1']}\nadmin: {token_env: T}\n", "needs 'servers'"),
        ("pools:\n  baseline: {servers: ['ftp://a:1']}\n  candidate: {servers: ['http://b:1']}\nadmin: {token_env: T}\n", "http"),
    ],
)
def test_bad_pools_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(RolloutError, match=message):
        load_rollout(write(tmp_path, text))


def test_a_control_pool_limits_steps_before_the_last_to_half(tmp_path: Path) -> None:
    text = MINIMAL.replace("admin:", "  control:\n    servers: ['http://127.0.0.1:8002']\nadmin:")
    assert load_rollout(write(tmp_path, text + "steps: [5, 50, 100]\n")).pools.control is not None
    with pytest.raises(RolloutError, match="at most 50 %"):
        load_rollout(write(tmp_path, text + "steps: [5, 75, 100]\n"))


def test_an_unknown_key_is_named_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(RolloutError) as err:
        load_with(tmp_path, "analysis:\n  window_s: 30\n  windwos_to_rollback: 2\n")
    assert f"{tmp_path / 'rollout.yaml'}:10: key 'analysis.windwos_to_rollback': unknown key" in str(err.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "not found"), ("pools: [unclosed\n", "not valid YAML"), ("- a list\n", "mapping at the top level"), ("", "empty")],
)
def test_unreadable_files_are_input_file_errors(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "rollout.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RolloutError, match=message) as err:
        load_rollout(path)
    assert isinstance(err.value, InputFileError) and err.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*rollout*.yaml")), ids=lambda p: p.name)
def test_every_example_rollout_loads(path: Path) -> None:
    r = load_rollout(path)
    assert r.steps[-1].percent == 100


def test_the_examples_are_the_embedded_default_and_the_checklists_fleet() -> None:
    embedded = load_rollout(EXAMPLES / "rollout-embedded.yaml")
    launches = [embedded.pools.baseline.launch, embedded.pools.candidate.launch]
    assert all(spec is not None and spec.model.startswith("embedded:") for spec in launches)
    assert embedded.pools.candidate.launch is not None and embedded.pools.candidate.launch.speculative_config
    fleet = load_rollout(EXAMPLES / "rollout-gpu-fleet.yaml")
    units = {arg for argv in fleet.hooks.rollback for arg in argv}
    assert {"vllm-target-baseline.service", "vllm-target-speculative.service"} <= units
    assert all(argv[0] == "systemctl" for argv in fleet.hooks.rollback + fleet.hooks.promote)


def test_off_loopback_the_admin_token_needs_32_bytes_and_tls_is_advised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = MINIMAL.replace("admin:\n  token_env: CANARY_TOKEN\n", "")
    remote = load_rollout(write(tmp_path, base + "admin: {listen: '0.0.0.0:8081', allow_remote: true, token_env: T}\n"))
    monkeypatch.setenv("T", "x")
    with pytest.raises(OptionError, match=r"off loopback, so its token needs at least 32 bytes \(got 1\)"):
        read_token(remote.admin)
    monkeypatch.setenv("T", "x" * 32)
    assert read_token(remote.admin) == "x" * 32
    assert "without TLS" in (remote_without_tls_warning(remote.admin) or "")
    local = load_rollout(write(tmp_path, MINIMAL))
    monkeypatch.setenv("CANARY_TOKEN", "x")  # on loopback a short token is the operator's call
    assert read_token(local.admin) == "x" and remote_without_tls_warning(local.admin) is None
    tls = load_rollout(write(tmp_path, base + "admin: {token_env: T, tls: {cert: no-such.pem, key: no-such.key}}\n"))
    assert tls.admin.tls is not None and tls.admin.tls.cert == str(tmp_path / "no-such.pem")
    with pytest.raises(OptionError, match="admin.tls: cannot load"):
        admin_ssl_context(tls.admin)


def test_a_launch_spec_vllm_would_refuse_is_refused_before_any_server_starts() -> None:
    """Issue 29: ``method: telepathy, num_speculative_tokens: -3`` started both servers before vLLM refused it."""
    from specguard.canary.ops.pools import check_launch_specs

    bad = LaunchSpec(model="m", speculative_config={"method": "telepathy", "num_speculative_tokens": -3})
    pools = {"baseline": Pool(launch=LaunchSpec(model="m")), "candidate": Pool(launch=bad)}
    with pytest.raises(InputFileError, match=r"pools\.candidate\.launch\.speculative_config: .*telepathy"):
        check_launch_specs(pools, "0.32.0")
    good = LaunchSpec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4})
    check_launch_specs({"candidate": Pool(launch=good)}, "0.32.0")
