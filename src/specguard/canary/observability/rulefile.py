"""Prometheus rule files as pydantic models, and their YAML text with a comment above each rule.

Recording rules take no annotations in Prometheus (``promtool check rules`` 2.42 rejects the key), so what a
recording rule computes and which vLLM releases it applies to goes into YAML comments above it; alerting
rules carry the same text in their annotations. PyYAML writes no comments, so each rule is dumped on its own
and the comments put in front. The same models read a file back (``read_rule_file``): a test checks that
what is written is what is modelled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices, ConfigDict, Field

from specguard.errors import InputFileError
from specguard.models_base import StrictModel

__all__ = ["AlertingRule", "RecordingRule", "RuleFile", "RuleGroup", "read_rule_file", "render_rule_file"]


class RecordingRule(StrictModel):
    record: str
    expr: str
    labels: dict[str, str] = Field(default_factory=dict)
    # Not part of the file format: the YAML comment lines written above the rule.
    comment: list[str] = Field(default_factory=list, exclude=True)


class AlertingRule(StrictModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    alert: str
    expr: str
    for_: str | None = Field(default=None, validation_alias=AliasChoices("for", "for_"), serialization_alias="for")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    comment: list[str] = Field(default_factory=list, exclude=True)


class RuleGroup(StrictModel):
    name: str
    interval: str | None = None
    rules: list[RecordingRule | AlertingRule]


class RuleFile(StrictModel):
    groups: list[RuleGroup]


def _dump(doc: Any) -> list[str]:
    # No line folding: a folded PromQL expression is valid YAML but unreadable in a diff.
    text: str = yaml.safe_dump(doc, sort_keys=False, width=1_000_000, allow_unicode=True)
    return text.splitlines()


def render_rule_file(header: list[str], rules: RuleFile) -> str:
    """The file's text: ``header`` as comments, then each group with each rule's comment lines above it."""
    lines = [f"# {h}".rstrip() for h in header] + ["groups:"]
    for group in rules.groups:
        head = group.model_dump(exclude={"rules"}, exclude_none=True)
        first, *rest = _dump(head)
        lines += [f"  - {first}", *(f"    {line}" for line in rest), "    rules:"]
        for rule in group.rules:
            lines += [f"      # {c}".rstrip() for c in rule.comment]
            body = rule.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False)
            body = {k: v for k, v in body.items() if v != {}}
            first, *rest = _dump(body)
            lines += [f"      - {first}", *(f"        {line}" for line in rest)]
    return "\n".join(lines) + "\n"


class RuleFileError(InputFileError):
    """A rule file that is not YAML or not a Prometheus rule file as modelled here."""


def read_rule_file(path: Path) -> RuleFile:
    from specguard.yaml_files import load_yaml_model

    return load_yaml_model(path, RuleFile, RuleFileError, "rule file")
