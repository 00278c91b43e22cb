"""A run directory's summary as ``specguard summary`` and the reports read it: summary.json, or recomputed.

A run killed before it wrote summary.json (SIGKILL, a crash) still has every finished request on disk; its
summary is recomputed from them and marked incomplete. Here, beside the run loop that writes summaries, and not
in ``results/``: recomputing is analysis, and ``results/`` (the file formats) sits below ``analysis/``.
"""

from __future__ import annotations

from pathlib import Path

from specguard.analysis.summarize import summarize
from specguard.results.models import Summary
from specguard.results.run_dir import RunDir
from specguard.results.store import RunDirError

__all__ = ["load_or_recompute_summary"]


def load_or_recompute_summary(run_dir: Path) -> Summary:
    """summary.json, or, for a run killed before it wrote one, the summary recomputed from its records, marked incomplete."""
    d = RunDir(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: run directory not found" if not run_dir.exists() else f"{run_dir}: not a directory")
    if d.has_summary():
        return d.summary()
    if not d.requests_jsonl.exists():
        raise RunDirError(f"{run_dir}: not a run directory (no {RunDir.SUMMARY} and no {RunDir.REQUESTS})")
    info, records, samples = d.load()
    records.sort(key=lambda r: r.seq)
    return summarize(records, samples, interrupted=info.interrupted, incomplete=True, slo=info.slo, gpu_samples=d.gpu_samples())
