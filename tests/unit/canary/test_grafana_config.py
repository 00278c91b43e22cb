"""The rollout file's ``grafana:`` key: what it takes, and errors that name the file, the line and the key."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from specguard.canary.notify.grafana import read_grafana_token
from specguard.canary.observability.dashboard import dashboard_uid
from specguard.canary.spec.rollout import Rollout, RolloutError, load_rollout
from specguard.errors import OptionError
from tests.canary_harness import MINIMAL_ROLLOUT

GRAFANA_LINE = MINIMAL_ROLLOUT.count("\n") + 2  # the first key under 'grafana:'


def load_with(tmp_path: Path, grafana: str) -> Rollout:
    path = tmp_path / "rollout.yaml"
    path.write_text(MINIMAL_ROLLOUT + "grafana:\n" + textwrap.indent(textwrap.dedent(grafana), "  "))
    return load_rollout(path)


def test_without_the_key_nothing_is_posted() -> None:
    pools = {"baseline": {"servers": ["http://a:1"]}, "candidate": {"servers": ["http://b:1"]}}
    r = Rollout.model_validate({"pools": pools, "admin": {"token_env": "T"}})
    assert r.grafana is None


def test_the_least_is_a_url_and_the_tokens_variable(tmp_path: Path) -> None:
    r = load_with(tmp_path, "url: https://grafana.example.com/grafana\ntoken_env: GRAFANA_TOKEN\n")
    assert r.grafana is not None
    assert (r.grafana.url, r.grafana.token_env) == ("https://grafana.example.com/grafana", "GRAFANA_TOKEN")
    assert r.grafana.dashboard_uid is None and r.grafana.tags == []
    assert 0 < r.grafana.timeout_s <= 60


def test_the_optional_keys_are_kept(tmp_path: Path) -> None:
    r = load_with(
        tmp_path, "url: http://127.0.0.1:3000\ntoken_env: G\ndashboard_uid: my-board_1\ntags: [prod, eu-west]\ntimeout_s: 2\n"
    )
    assert r.grafana is not None
    assert (r.grafana.dashboard_uid, r.grafana.tags, r.grafana.timeout_s) == ("my-board_1", ["prod", "eu-west"], 2.0)


def test_the_default_dashboard_is_the_generated_ones_uid() -> None:
    # One owner: the annotations' default and the dashboard's uid both come from dashboard_uid.
    # Issue 28: uids were cut at 40 characters, so two names sharing a 30-character prefix shared a dashboard
    # and a cut could end in '-'; a sha256 suffix keeps them apart and every uid is Grafana-valid.
    assert re.fullmatch(r"specguard-gpu-fleet-[0-9a-f]{8}", dashboard_uid("gpu-fleet"))
    shared = "eu-west-llama-70b-spec-ngram-k4"  # 31 characters
    names = [shared + "-a", shared + "-b", "x" * 100, "a" * 20 + "-" + "b" * 20, "gpu fleet/eu", "ü", "-"]
    uids = [dashboard_uid(n) for n in names]
    assert len(set(uids)) == len(names)
    for uid in uids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid) and not uid.endswith("-"), uid
    assert dashboard_uid("gpu-fleet") == dashboard_uid("gpu-fleet")


@pytest.mark.parametrize(
    ("grafana", "line", "key", "message"),
    [
        ("url: ftp://grafana:3000\ntoken_env: G\n", 0, "grafana.url", "http"),
        ("url: http://admin:pw@grafana:3000\ntoken_env: G\n", 0, "grafana.url", "credentials do not go in a URL"),
        ("url: http://grafana:3000\ntoken_env: 'glsa_abc def'\n", 1, "grafana.token_env", "not an environment variable name"),
        ("url: http://grafana:3000\ntoken_env: G\ndashboard_uid: 'no spaces'\n", 2, "grafana.dashboard_uid", "1-40"),
        ("url: http://grafana:3000\ntoken_env: G\ndashboard_uid: " + "a" * 41 + "\n", 2, "grafana.dashboard_uid", "1-40"),
        ("url: http://grafana:3000\ntoken_env: G\ntags: [a, a]\n", 2, "grafana.tags", "each tag once"),
        ("url: http://grafana:3000\ntoken_env: G\ntags: ['  ']\n", 2, "grafana.tags", "not only spaces"),
        ("url: http://grafana:3000\ntoken_env: G\ntimeout_s: 0\n", 2, "grafana.timeout_s", "greater than 0"),
        ("url: http://grafana:3000\ntoken_env: G\ntoken: glsa_secret\n", 2, "grafana.token", "unknown key"),
    ],
)
def test_bad_keys_are_refused_naming_the_line_and_key(tmp_path: Path, grafana: str, line: int, key: str, message: str) -> None:
    with pytest.raises(RolloutError, match=message) as err:
        load_with(tmp_path, grafana)
    assert f"{tmp_path / 'rollout.yaml'}:{GRAFANA_LINE + line}: key '{key}'" in str(err.value)


def test_the_tokens_variable_is_required(tmp_path: Path) -> None:
    with pytest.raises(RolloutError, match="grafana.token_env"):
        load_with(tmp_path, "url: http://grafana:3000\n")


def test_the_token_is_read_from_the_environment_and_a_missing_one_is_named_not_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = load_with(tmp_path, "url: http://grafana:3000\ntoken_env: SPECGUARD_TEST_GRAFANA_TOKEN\n")
    assert r.grafana is not None
    monkeypatch.delenv("SPECGUARD_TEST_GRAFANA_TOKEN", raising=False)
    with pytest.raises(OptionError, match="SPECGUARD_TEST_GRAFANA_TOKEN is not set"):
        read_grafana_token(r.grafana)
    monkeypatch.setenv("SPECGUARD_TEST_GRAFANA_TOKEN", " glsa_value \n")
    assert read_grafana_token(r.grafana) == "glsa_value"
