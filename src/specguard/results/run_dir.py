"""The layout of a run directory (what ``specguard bench --out`` writes), owned here and nowhere else.

DIR/run.json              RunInfo          what was run, against what, when
DIR/requests.jsonl        RequestRecord    one line per measured request, flushed as each finishes
DIR/server_metrics.jsonl  MetricsSample    one line per /metrics scrape (or failed scrape)
DIR/gpu_metrics.jsonl     GpuSample        one line per GPU sampling, if sampled
DIR/outputs.jsonl         OutputRecord     each request's output, only while a check compares greedy outputs
                                           (deleted after its verdict) or with --keep-output
DIR/summary.json          Summary          the derived figures

Every other module names these files through a ``RunDir``, as a check directory's through ``CheckDir``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from specguard.results.models import GpuSample, MetricsSample, OutputRecord, RequestRecord, RunInfo, Summary
from specguard.results.store import JsonlAppender, RunDirError, read_json, read_jsonl, write_json_atomic

__all__ = [
    "RunDir",
    "RunWriter",
    "load_gpu_samples",
    "load_run",
    "load_summary",
]


@dataclass(frozen=True)
class RunDir:
    root: Path

    RUN: ClassVar[str] = "run.json"
    REQUESTS: ClassVar[str] = "requests.jsonl"
    METRICS: ClassVar[str] = "server_metrics.jsonl"
    GPU_METRICS: ClassVar[str] = "gpu_metrics.jsonl"
    OUTPUTS: ClassVar[str] = "outputs.jsonl"
    SUMMARY: ClassVar[str] = "summary.json"

    @property
    def run_json(self) -> Path:
        return self.root / self.RUN

    @property
    def requests_jsonl(self) -> Path:
        return self.root / self.REQUESTS

    @property
    def metrics_jsonl(self) -> Path:
        return self.root / self.METRICS

    @property
    def gpu_metrics_jsonl(self) -> Path:
        return self.root / self.GPU_METRICS

    @property
    def outputs_jsonl(self) -> Path:
        return self.root / self.OUTPUTS

    @property
    def summary_json(self) -> Path:
        return self.root / self.SUMMARY

    @property
    def content(self) -> tuple[Path, Path]:
        """The files that are the run (what an import hashes): the rest is derived from them or optional."""
        return self.run_json, self.requests_jsonl

    def is_run(self) -> bool:
        return self.run_json.exists()

    def has_summary(self) -> bool:
        return self.summary_json.exists()

    def held(self) -> list[str]:
        """The names of the files that make this directory a run already (a new run must not write into it)."""
        return [p.name for p in (self.requests_jsonl, self.run_json) if p.exists()]

    def info(self) -> RunInfo:
        return read_json(self.run_json, RunInfo)

    def records(self) -> list[RequestRecord]:
        return read_jsonl(self.requests_jsonl, RequestRecord)

    def metrics(self) -> list[MetricsSample]:
        """server_metrics.jsonl; empty for a run without one."""
        return read_jsonl(self.metrics_jsonl, MetricsSample) if self.metrics_jsonl.exists() else []

    def gpu_samples(self) -> list[GpuSample]:
        """gpu_metrics.jsonl; empty for a run that did not sample its GPUs (or predates GPU sampling)."""
        return read_jsonl(self.gpu_metrics_jsonl, GpuSample) if self.gpu_metrics_jsonl.exists() else []

    def outputs(self) -> list[OutputRecord] | None:
        """outputs.jsonl; None for a run without one."""
        return read_jsonl(self.outputs_jsonl, OutputRecord) if self.outputs_jsonl.exists() else None

    def summary(self) -> Summary:
        return read_json(self.summary_json, Summary)

    def load(self) -> tuple[RunInfo, list[RequestRecord], list[MetricsSample]]:
        if not self.root.exists():
            raise RunDirError(f"{self.root}: run directory not found")
        if not self.root.is_dir():
            raise RunDirError(f"{self.root}: not a directory; expected a run directory written by 'specguard bench'")
        return self.info(), self.records(), self.metrics()

    def write_run(self, info: RunInfo) -> None:
        write_json_atomic(self.run_json, info)

    def write_summary(self, summary: Summary) -> None:
        write_json_atomic(self.summary_json, summary)

    def write_records(self, records: Sequence[RequestRecord]) -> None:
        """requests.jsonl in one write (an imported run's records; a measured run appends through ``RunWriter``)."""
        self.requests_jsonl.write_text("".join(r.model_dump_json() + "\n" for r in records), encoding="utf-8")


class RunWriter:
    """A new run directory being measured into: requests.jsonl created empty, server_metrics.jsonl open for appends."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        d = RunDir(out_dir)
        existing = d.held()
        if existing:
            raise RunDirError(f"{out_dir}: already holds a run ({', '.join(existing)}); choose a new --out directory")
        self.dir = out_dir
        self.run_dir = d
        self.requests_path = d.requests_jsonl
        self.requests_path.touch()
        self.metrics = JsonlAppender(d.metrics_jsonl)

    def write_run(self, info: RunInfo) -> None:
        self.run_dir.write_run(info)

    def write_summary(self, summary: Summary) -> None:
        self.run_dir.write_summary(summary)

    def close(self) -> None:
        self.metrics.close()


def load_run(run_dir: Path) -> tuple[RunInfo, list[RequestRecord], list[MetricsSample]]:
    return RunDir(run_dir).load()


def load_gpu_samples(run_dir: Path) -> list[GpuSample]:
    return RunDir(run_dir).gpu_samples()


def load_summary(run_dir: Path) -> Summary:
    return RunDir(run_dir).summary()
