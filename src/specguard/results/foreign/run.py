"""A run of any supported format in specguard's models: what ``compare`` and a check's baseline take."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from specguard.results.models import RequestRecord, RunInfo

__all__ = ["ImportedBaseline", "LoadedRun", "RunFormat"]

RunFormat = Literal["specguard", "vllm-bench", "guidellm"]


@dataclass(frozen=True)
class LoadedRun:
    """A run of any supported format: its info and records in specguard's models, and what the mapping lost."""

    name: str
    format: RunFormat
    info: RunInfo
    records: list[RequestRecord]
    warnings: list[str] = field(default_factory=list)


class ImportedBaseline(BaseModel):
    """One cell's baseline taken from an existing run (``check --baseline-run``) instead of measured by the check."""

    cell: str = Field(description="the cell, as the check's run directories name it: TRAFFIC__SAMPLING__pI")
    source: str = Field(description="the run as given: a run directory, or a result file (FILE#N: its N-th benchmark)")
    format: RunFormat
    sha256: str = Field(description="of the file's bytes; of a run directory's run.json and requests.jsonl")
    requests: int
    warnings: list[str] = Field(default_factory=list, description="what the run's format could not carry, or the check verify")
