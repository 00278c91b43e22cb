"""The rollout file's ``grafana:`` key: where every canary decision is posted as a Grafana annotation.

An operator looking at a latency spike on the canary's dashboard wants to see, on the same graph, that the
weight went to 5 % a minute before, and which pools were pinned then. With ``grafana:`` set, the controller
posts each decision (start, advance, promote, rollback, pause, resume) to Grafana's annotations HTTP API
(``notify.grafana``). Only the NAME of the environment variable holding the service-account token is
written here, as ``admin.token_env`` and ``--api-key-env`` do elsewhere: a token in a rollout file would end
up in the state file's copy of the rollout, in version control and in ``ps``.

This module imports nothing of ``rollout.py`` (which imports it); the dashboard's default uid depends on the
rollout's name, so it is resolved where both are known (``control.run`` and ``notify.grafana.dashboard_record``).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from specguard.canary.spec.validators import EnvName
from specguard.models_base import FiniteModel
from specguard.validation import HttpUrl

__all__ = ["GrafanaConfig"]

# Grafana's rule for a dashboard uid: at most 40 characters, letters, digits, '-' and '_'.
_UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
# Grafana's annotation tags are free text; these bounds keep a tag a label rather than a paragraph.
_MAX_TAG = 100


class GrafanaConfig(FiniteModel):
    """Grafana's URL, the token's environment variable, the dashboard to annotate and extra tags."""

    url: HttpUrl = Field(description="Grafana's root URL, http(s)://host[:port][/subpath]")
    token_env: EnvName = Field(description="the environment variable holding a service-account token (never the token)")
    dashboard_uid: str | None = Field(
        default=None, description="default: the uid of the dashboard 'specguard canary observability' writes"
    )
    tags: list[str] = Field(default_factory=list, description="added to every annotation's tags")
    timeout_s: float = Field(default=5.0, gt=0, le=60, description="per post: a Grafana that hangs never holds a decision back")

    @field_validator("dashboard_uid")
    @classmethod
    def _uid(cls, value: str | None) -> str | None:
        if value is not None and not _UID.match(value):
            raise ValueError(f"a Grafana dashboard uid is 1-40 letters, digits, '-' or '_' (got {value!r})")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        for tag in value:
            if not tag.strip() or len(tag) > _MAX_TAG:
                raise ValueError(f"a tag is 1-{_MAX_TAG} characters, not only spaces (got {tag!r})")
        if len(set(value)) != len(value):
            raise ValueError(f"each tag once (got {value})")
        return value
