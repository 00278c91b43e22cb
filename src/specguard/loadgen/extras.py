"""``--label``, ``--header`` and ``--extra-body``: what an operator adds to a run, parsed and checked at the edge.

Labels are free metadata (``team=search``) stored in run.json and carried into reports. Headers go on every
request; a header whose name looks like a credential (``Authorization``, ``Proxy-Authorization``, ``Cookie``,
or a name containing ``key``, ``token``, ``secret``, ``password`` or ``auth``) is sent but never stored or
logged: run.json keeps its name with the value ``<redacted>``. The extra body is merged into every request
body (``{"chat_template_kwargs": {"enable_thinking": false}}``); it may not replace the keys specguard's
measurement depends on (model, prompt or messages, stream, stream_options).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from specguard.errors import OptionError
from specguard.results.models import SamplingOverrides
from specguard.validation import describe

__all__ = [
    "REDACTED",
    "RESERVED_BODY_KEYS",
    "is_secret_header",
    "parse_labels",
    "parse_headers",
    "parse_extra_body",
    "stored_headers",
    "merge_extra_body",
]

REDACTED = "<redacted>"
RESERVED_BODY_KEYS = frozenset({"model", "prompt", "messages", "stream", "stream_options"})
_SECRET_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
_SECRET_PARTS = ("key", "token", "secret", "password", "auth")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 field-name
# Control characters other than HTAB are not allowed in a field value (RFC 9110 5.5); CR or LF would
# split the header into another one (header injection), and aiohttp refuses them mid-run as an internal error.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class _BodySampling(SamplingOverrides):
    """The sampling keys an extra body may set, held to the bounds of the options that set them.

    ``--max-tokens 0`` is refused; ``{"max_tokens": 0}`` in an extra body overrides it on the wire, so it is
    checked by the same model (strict: a string or a bool is not a number). Other keys pass untouched.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, strict=True)

    max_completion_tokens: int | None = Field(default=None, ge=1)  # the chat API's name for max_tokens


def is_secret_header(name: str) -> bool:
    low = name.lower()
    return low in _SECRET_NAMES or any(part in low for part in _SECRET_PARTS)


def parse_labels(values: Sequence[str], option: str = "--label") -> dict[str, str]:
    """``KEY=VALUE`` pairs; a key given twice is an error (which one was meant?)."""
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        key = key.strip()
        if not sep or not key:
            raise OptionError(f"{option} {v!r}: expected KEY=VALUE")
        if key in out:
            raise OptionError(f"{option} {v!r}: the key {key!r} is given twice")
        out[key] = value
    return out


def parse_headers(values: Sequence[str], option: str = "--header") -> dict[str, str]:
    """``NAME:VALUE`` pairs; names are HTTP field names; the error never repeats a secret header's value."""
    out: dict[str, str] = {}
    for v in values:
        name, sep, value = v.partition(":")
        name = name.strip()
        shown = f"{name}:{REDACTED}" if is_secret_header(name) else v
        if not sep or not _TOKEN.match(name):
            raise OptionError(f"{option} {shown!r}: expected NAME:VALUE with an HTTP header name")
        bad = _CONTROL.search(value)
        if bad:
            raise OptionError(
                f"{option} {shown!r}: the value holds the control character {bad.group()!r}; expected one line of text"
            )
        if name.lower() in {k.lower() for k in out}:
            raise OptionError(f"{option} {shown!r}: the header {name!r} is given twice")
        if name.lower() in ("content-type", "x-request-id"):
            raise OptionError(f"{option} {shown!r}: specguard sets {name} itself")
        out[name] = value.strip()
    return out


def parse_extra_body(text: str | None, option: str = "--extra-body") -> dict[str, Any]:
    """A JSON object merged into each request body."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{option}: not JSON ({exc.msg} at column {exc.colno})") from exc
    return check_extra_body(data, option)


def check_extra_body(data: object, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise OptionError(f"{where}: expected a JSON object, got {type(data).__name__}")
    reserved = sorted(RESERVED_BODY_KEYS & set(data))
    if reserved:
        raise OptionError(f"{where}: {', '.join(reserved)} cannot be overridden (specguard's measurement sets them)")
    try:
        _BodySampling.model_validate(data)
    except ValidationError as exc:
        raise OptionError(f"{where}: {'; '.join(describe(exc))}") from exc
    return dict(data)


def stored_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers as run.json keeps them: credential-like values replaced by ``<redacted>``."""
    return {k: REDACTED if is_secret_header(k) else v for k, v in headers.items()}


def merge_extra_body(body: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with ``extra``'s keys added (they win over sampling keys: the operator asked for them)."""
    return {**body, **extra} if extra else body
