"""The partial report's data: an interrupted check's runs so far, what is missing, and no verdict."""

from __future__ import annotations

from pydantic import BaseModel

from specguard.results.models import Summary

__all__ = ["PartialReport", "PartialRun"]


class PartialRun(BaseModel):
    arm: str
    repetition: str
    cell: str
    summary: Summary


class PartialReport(BaseModel):
    plan: str
    plan_path: str
    out: str
    missing: list[str]
    runs: list[PartialRun]
    definitions: dict[str, str]
    simulated: bool = False  # a run's server was specguard's simulated engine (its run.json server_version)
