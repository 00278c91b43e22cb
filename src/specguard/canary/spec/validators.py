"""The rollout file's shared field types and validators: one owner each, for every key that takes them.

``HeaderName`` (an HTTP header a sticky key or a segment is read from), ``EnvName`` (the NAME of an environment
variable holding a token: ``admin.token_env``, ``metrics.token_env``, ``grafana.token_env``; a token itself in a
rollout file would end up in the state file's copy of the rollout, in version control and in ``ps``), and
``bare_word_union``, the wrap validator of a tagged key that also takes a bare word (``engine: haproxy``,
``metrics: prometheus``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import AfterValidator, ValidationError, ValidatorFunctionWrapHandler
from pydantic_core import InitErrorDetails

__all__ = ["ENV_NAME", "EnvName", "HeaderName", "bare_word_union"]

# An HTTP header name (RFC 9110 token); headers are matched case-insensitively, so they are kept lower case.
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _header_name(value: str) -> str:
    if not _HEADER.match(value):
        raise ValueError(f"not an HTTP header name (got {value!r})")
    return value.lower()


def _env_name(value: str) -> str:
    if not ENV_NAME.match(value):
        raise ValueError(f"not an environment variable name (got {value!r}); give the variable's name, not the token")
    return value


HeaderName = Annotated[str, AfterValidator(_header_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]


def _untagged(errors: Iterable[Any], tag: object) -> list[InitErrorDetails]:
    out: list[InitErrorDetails] = []
    for e in errors:
        loc = tuple(e["loc"])
        if loc and loc[0] == tag:
            loc = loc[1:]
        details = InitErrorDetails(type=e["type"], loc=loc, input=e["input"])
        if "ctx" in e:
            details["ctx"] = e["ctx"]
        out.append(details)
    return out


def bare_word_union(tag_key: str) -> Callable[[Any, ValidatorFunctionWrapHandler], Any]:
    """The wrap validator of a tagged union keyed by ``tag_key``: a bare word is ``{tag_key: WORD}``; errors keep
    the file's key path.

    pydantic puts the union's tag into an error's location (``engine.gateway-api.route``); the rollout file
    has no such key, so the line and key an error names would be wrong. The tag is taken out again here.
    """

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(value, str):
            value = {tag_key: value}
        try:
            return handler(value)
        except ValidationError as exc:
            tag = value.get(tag_key) if isinstance(value, dict) else None
            raise ValidationError.from_exception_data(exc.title, _untagged(exc.errors(), tag)) from None

    return validate
