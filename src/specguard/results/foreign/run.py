"""A run of any supported format in specguard's models: what ``compare`` and a check's baseline take."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from specguard.results.models import RequestRecord, RunInfo

__all__ = ["RunFormat", "LoadedRun"]

RunFormat = Literal["specguard", "vllm-bench", "guidellm"]


@dataclass(frozen=True)
class LoadedRun:
    """A run of any supported format: its info and records in specguard's models, and what the mapping lost."""

    name: str
    format: RunFormat
    info: RunInfo
    records: list[RequestRecord]
    warnings: list[str] = field(default_factory=list)
