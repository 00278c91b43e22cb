"""--label, --header, --extra-body and the OPENAI_* defaults of bench."""

from __future__ import annotations

import pytest

from specguard.errors import OptionError
from specguard.loadgen.extras import (
    REDACTED,
    merge_extra_body,
    parse_extra_body,
    parse_headers,
    parse_labels,
    stored_headers,
)
from specguard.loadgen.request import openai_env_defaults
from specguard.results.models import RunInfo


def test_labels_are_key_value_pairs() -> None:
    assert parse_labels(["team=search", "ticket=OPS-1=b"]) == {"team": "search", "ticket": "OPS-1=b"}
    with pytest.raises(OptionError, match="KEY=VALUE"):
        parse_labels(["nokey"])
    with pytest.raises(OptionError, match="twice"):
        parse_labels(["a=1", "a=2"])


def test_credential_headers_are_sent_but_stored_redacted() -> None:
    headers = parse_headers(["Authorization: Bearer s3cret", "X-Api-Key:abc", "X-Tenant: blue"])
    assert headers["Authorization"] == "Bearer s3cret"
    stored = stored_headers(headers)
    assert stored == {"Authorization": REDACTED, "X-Api-Key": REDACTED, "X-Tenant": "blue"}


def test_a_bad_secret_header_error_does_not_repeat_its_value() -> None:
    with pytest.raises(OptionError) as exc:
        parse_headers(["Bad Authorization:s3cret"])
    assert "s3cret" not in str(exc.value)


def test_extra_body_is_merged_and_cannot_replace_the_measured_keys() -> None:
    extra = parse_extra_body('{"chat_template_kwargs": {"enable_thinking": false}}')
    body = merge_extra_body({"model": "m", "prompt": "p"}, extra)
    assert body == {"model": "m", "prompt": "p", "chat_template_kwargs": {"enable_thinking": False}}
    with pytest.raises(OptionError, match="stream_options"):
        parse_extra_body('{"stream_options": {}}')
    with pytest.raises(OptionError, match="not JSON"):
        parse_extra_body("{")
    with pytest.raises(OptionError, match="JSON object"):
        parse_extra_body("[1]")


def test_openai_environment_gives_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k1")
    assert openai_env_defaults(None, None, False) == ("http://127.0.0.1:9/v1", "k1")
    assert openai_env_defaults("http://h:1", "k2", True) == ("http://h:1", "k2")
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(OptionError, match="OPENAI_BASE_URL"):
        openai_env_defaults(None, None, False)


def test_run_json_without_labels_still_loads() -> None:
    old = {
        "tool_version": "0.1",
        "base_url": "http://h:1",
        "api": "completions",
        "model": "m",
        "metrics_url": None,
        "prompt_source": "p",
        "prompt_count": 1,
        "load": {"kind": "idle"},
        "sampling": {},
        "started_unix": 0.0,
        "started_monotonic": 0.0,
    }
    info = RunInfo.model_validate(old)
    assert info.labels == {} and info.headers == {} and info.extra_body is None
