"""Engine steps rebuilt from a ``specguard bench`` run's client records, for ``sim calibrate``. Pure but for reading.

vLLM streams each decode step's tokens to every running request at the step's end, so every token-bearing
chunk after a request's first closes one step of that request, and the gap since its previous chunk is that
step (or several, when the server's output loop grouped two steps' tokens into one delta). For each gap the
step's load is rebuilt from every request of the run at the gap's midpoint ``m``:

  decoding   requests whose first token came at or before ``m`` and whose last came at or after it
  context    per decoding request, prompt + tokens received by ``m`` + k: the KV already computed (the last
             sampled token has none yet) plus the 1 + k tokens the step feeds, as ``engine.SimEngine`` counts it;
             plus the prompt of each prefill
  batched    decoding requests x (1 + k) + the prompts of requests whose first token came with the gap's end

k is the run's mean draft tokens per decode step: the server's ``spec_draft_tokens`` delta over the decode
steps the client saw (0 for a baseline run). A prompt long enough to be chunked over several steps is charged
to the step that returns its first token, and requests waiting in the queue charge nothing.

A gap inside which most of the other decoding requests got a chunk spans a step end this request's stream
skipped (``spans_steps``); ``calibrate`` leaves those out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from specguard.errors import InputFileError
from specguard.results.models import MetricsSample, RequestRecord, RunInfo
from specguard.results.run_dir import load_run
from specguard.server_metrics.parse import counter_delta

F64 = NDArray[np.float64]
RunKind = Literal["baseline", "speculative"]
CLIENT_SKEW_S = 0.001  # how far apart the client may stamp chunks of one step on different streams


@dataclass(frozen=True)
class RunSteps:
    """One run's observed gaps and the load rebuilt for each."""

    path: Path
    info: RunInfo
    kind: RunKind
    draft_tokens_per_step: float
    gap_s: F64
    context_tokens: F64
    batched_tokens: F64
    spans_steps: NDArray[np.bool_]  # another request's chunk came inside the gap: it covers more than one step


@dataclass(frozen=True)
class _Timeline:
    first_t: float
    last_t: float
    prompt: int
    times: F64  # absolute times (run clock) of the token-bearing chunks
    tokens: NDArray[np.int64]


def _timeline(r: RequestRecord) -> _Timeline | None:
    pairs = [(t, n) for t, n in zip(r.chunk_times_s, r.chunk_tokens, strict=False) if n > 0]
    if not r.ok or not pairs:
        return None
    times = r.sent_s + np.asarray([t for t, _ in pairs], dtype=np.float64)
    tokens = np.asarray([n for _, n in pairs], dtype=np.int64)
    return _Timeline(float(times[0]), float(times[-1]), r.prompt_tokens or 0, times, tokens)


def _window(samples: list[MetricsSample]) -> tuple[MetricsSample, MetricsSample] | None:
    """The "before" and "after" scrapes (the first and last good ones if those are missing), as the summary takes them."""
    good = [s for s in samples if s.ok]
    before = next((s for s in good if s.phase == "before"), good[0] if good else None)
    after = next((s for s in reversed(good) if s.phase == "after"), good[-1] if good else None)
    return (before, after) if before is not None and after is not None and before is not after else None


def _spec_counters(samples: list[MetricsSample]) -> tuple[float, float]:
    """Drafts and draft tokens over the run's scrape window; zeros without spec-decode counters."""
    window = _window(samples)
    if window is None:
        return 0.0, 0.0
    drafts = counter_delta(*window, "spec_drafts") or 0.0
    draft_tokens = counter_delta(*window, "spec_draft_tokens") or 0.0
    return max(drafts, 0.0), max(draft_tokens, 0.0)


def _sums_upto(keys: F64, values: F64, at: F64, right: bool = True) -> F64:
    """For each of ``at``: the sum of ``values`` whose key is <= it (``right``) or < it."""
    order = np.argsort(keys, kind="stable")
    k, c = keys[order], np.concatenate([[0.0], np.cumsum(values[order])])
    return c[np.searchsorted(k, at, side="right" if right else "left")]


def run_steps(run_dir: Path) -> RunSteps:
    """A run directory's gaps and rebuilt loads; an ``InputFileError`` naming the directory if it has no timelines."""
    info, records, samples = load_run(run_dir)
    lines = [(i, tl) for i, r in enumerate(records) if (tl := _timeline(r)) is not None]
    if not any(len(tl.times) >= 2 and records[i].prompt_tokens is not None for i, tl in lines):
        raise InputFileError(
            f"{run_dir}: no usable chunk timelines ({len(records)} requests, {len(lines)} succeeded with streamed tokens; "
            "calibration needs successful streamed requests with two or more token-bearing chunks and prompt_tokens)"
        )
    first = np.asarray([tl.first_t for _, tl in lines])
    last = np.asarray([tl.last_t for _, tl in lines])
    prompt = np.asarray([tl.prompt for _, tl in lines], dtype=np.float64)
    output = np.asarray([tl.tokens.sum() for _, tl in lines], dtype=np.float64)
    all_t = np.concatenate([tl.times for _, tl in lines])
    all_n = np.concatenate([tl.tokens for _, tl in lines]).astype(np.float64)
    usable = [(i, tl) for i, tl in lines if len(tl.times) >= 2 and records[i].prompt_tokens is not None]
    t0 = np.concatenate([tl.times[:-1] for _, tl in usable])
    t1 = np.concatenate([tl.times[1:] for _, tl in usable])
    decode_steps = sum(len(tl.times) - 1 for _, tl in lines)
    drafts, draft_tokens = _spec_counters(samples)
    # per decode step: the client sees fewer steps than ran when the server grouped two into one chunk, but
    # every draft is one request's step, so the larger count is the closer one
    steps = max(decode_steps, drafts)
    k = draft_tokens / steps if steps else 0.0
    m = (t0 + t1) / 2
    ones = np.ones_like(first)
    # decoding at m: first token at or before m, minus those whose last token came before m
    n_dec = _sums_upto(first, ones, m) - _sums_upto(last, ones, m, right=False)
    prompt_dec = _sums_upto(first, prompt, m) - _sums_upto(last, prompt, m, right=False)
    received_dec = _sums_upto(all_t, all_n, m) - _sums_upto(last, output, m, right=False)
    # A prefill's first token comes with the step's other tokens, but each stream is stamped on its own read
    # (and sent_s + chunk time rounds), so its window reaches a little past t1: closed at t1, the exact
    # synthetic runs lost 6 prompts of 11297 gaps to the next step; reaching half a gap past t1 instead
    # took in the next step's prompt after a long step (per-KV-token cost 1.2 % off).
    skew = np.minimum((t1 - t0) / 4, CLIENT_SKEW_S)
    prefill = _sums_upto(first, prompt, t1 + skew) - _sums_upto(first, prompt, m)
    # every step ends with a chunk to each running request, so one landing well inside the gap is a step end
    # this request did not see (the server grouped its tokens of two steps into one chunk)
    ordered = np.sort(all_t)
    inside = np.searchsorted(ordered, t1 - skew, side="left") - np.searchsorted(ordered, t0 + skew, side="right")
    return RunSteps(
        path=run_dir,
        info=info,
        kind="speculative" if draft_tokens > 0 else "baseline",
        draft_tokens_per_step=k,
        gap_s=t1 - t0,
        context_tokens=prompt_dec + received_dec + n_dec * k + prefill,
        batched_tokens=n_dec * (1 + k) + prefill,
        spans_steps=inside >= np.maximum(1.0, (n_dec - 1) / 2),
    )
