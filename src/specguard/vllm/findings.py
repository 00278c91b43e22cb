"""One finding against a vLLM rule: what is wrong, by which rule, and how to fix it (preflight, sizing, command lines)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Severity = Literal["error", "warning", "info"]


class Finding(BaseModel):
    key: str
    message: str
    severity: Severity = "error"
    rule: str = ""
    fix: str = ""
    source: Literal["specguard", "vllm"] = "specguard"


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]
