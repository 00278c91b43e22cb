"""A ``specguard bench`` run as the simulator's input: its traffic, its acceptance, and what it measured.

The traffic is the run's own: each successful request's send time (a trace) or, for a closed-loop run, its
concurrency, with the server-counted prompt and output tokens of each request. The acceptance is the run's
server counters (``acceptance.per_position``), and the share of decode steps that got a draft at all (an
n-gram proposer finds no match in the others): drafts / (output tokens - requests - accepted tokens), since
each request's first token comes from its prefill and each decode step yields 1 + accepted tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from specguard.errors import InputFileError
from specguard.loadgen.run_summary import load_or_recompute_summary
from specguard.results.models import Summary
from specguard.results.run_dir import load_run


@dataclass(frozen=True)
class RunWorkload:
    path: Path
    arrivals_s: NDArray[np.float64]
    prompts: NDArray[np.int64]
    outputs: NDArray[np.int64]
    concurrency: int | None
    load_kind: str  # run.json's load.kind: closed-loop runs (concurrency, idle) set their own pace
    acceptance: list[float] | None
    draft_fraction: float | None
    block_size: int | None
    num_blocks: int | None
    measured: Summary

    @property
    def speculative(self) -> bool:
        return bool(self.acceptance)


def _int_label(labels: dict[str, str] | None, key: str) -> int | None:
    try:
        return int(labels[key]) if labels and key in labels else None
    except ValueError:
        return None


def run_workload(run_dir: Path) -> RunWorkload:
    info, records, _ = load_run(run_dir)
    ok = sorted((r for r in records if r.ok and r.prompt_tokens and r.output_tokens), key=lambda r: r.sent_s)
    if not ok:
        raise InputFileError(f"{run_dir}: no successful request with server-counted tokens to simulate")
    summary = load_or_recompute_summary(run_dir)
    t0 = ok[0].sent_s
    concurrency = info.load.concurrency if info.load.kind in ("concurrency", "idle") else None
    if info.load.kind == "idle":
        concurrency = 1
    acc = summary.acceptance
    per_pos = [min(1.0, max(0.0, a)) for a in acc.per_position] if acc and acc.drafts > 0 else None
    if per_pos:  # counters read at two scrapes can be a hair out of order; the sampler needs them non-increasing
        per_pos = [min(per_pos[: i + 1]) for i in range(len(per_pos))]
    fraction = None
    if acc and acc.drafts > 0:
        decode_steps = sum(r.output_tokens or 0 for r in ok) - len(ok) - acc.accepted_tokens
        fraction = min(1.0, acc.drafts / decode_steps) if decode_steps > 0 else 1.0
    return RunWorkload(
        path=run_dir,
        arrivals_s=np.asarray([r.sent_s - t0 for r in ok], dtype=np.float64),
        prompts=np.asarray([r.prompt_tokens for r in ok], dtype=np.int64),
        outputs=np.asarray([r.output_tokens for r in ok], dtype=np.int64),
        concurrency=concurrency,
        load_kind=info.load.kind,
        acceptance=per_pos,
        draft_fraction=fraction,
        block_size=_int_label(info.cache_config, "block_size"),
        num_blocks=_int_label(info.cache_config, "num_gpu_blocks"),
        measured=summary,
    )
