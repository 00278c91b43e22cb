"""Greedy-output equivalence: do the candidate's outputs at temperature 0 match the baseline's? Pure.

Speculative decoding is meant to be lossless under greedy decoding; a wrong
draft path, a kernel bug or a numerics difference can change outputs. But the
baseline itself is not bit-stable: batching changes the order of floating-point
reductions, and a near-tie between two tokens can flip. So the candidate is
judged against the baseline's own variation, measured the same way.

How requests are matched. A prompt is identified by its item (its position in
the prompt set: with ``turns: all`` several items share a file line). Its
reference output is the baseline's first successful request of that item (the
lowest repetition, then the lowest seq). Every other successful baseline
request of the item is compared with the reference (the baseline's own
variation, across repetitions, and across repeats within a run when the run
sends a prompt more than once), and so is every successful candidate request.
Failed requests and items without a reference are left out.

A comparison is in token ids when every output of the segment has them
(vLLM's ``return_token_ids``); otherwise in text, characters, and the result
says so. The first divergence position is the index of the first token (or
character) that differs; when one output is a prefix of the other, the
shorter one's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from specguard.models_base import StrictModel

__all__ = [
    "DivergenceStats",
    "Output",
    "SegmentEquivalence",
    "divergence_stats",
    "equivalence_by_segment",
    "first_divergence",
    "segment_equivalence",
]

Unit = Literal["tokens", "characters"]
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class Output:
    """One successful request's output, with what identifies its prompt."""

    item: int
    rep: int
    seq: int
    segment: str
    token_ids: tuple[int, ...] | None
    text: str | None


class DivergenceStats(StrictModel):
    """An arm's requests compared with the reference outputs."""

    compared: int
    differing: int
    share: float | None = Field(description="differing / compared; None when nothing was compared")
    first_divergence_median: float | None = Field(description="median first divergence position of the differing ones")
    first_divergence_quantiles: dict[str, float] = Field(
        default_factory=dict, description="p10, p25, p50, p75, p90 of the first divergence positions"
    )
    first_divergence_min: int | None = None
    first_divergence_max: int | None = None


class SegmentEquivalence(StrictModel):
    """One segment of a temperature-0 cell: the candidate's divergence beside the baseline's own."""

    segment: str
    unit: Unit = Field(description="tokens (token ids compared) or characters (text compared: no ids came back)")
    prompts: int = Field(description="items with a baseline reference output")
    baseline: DivergenceStats = Field(description="the baseline's other requests against the reference: its own variation")
    candidate: DivergenceStats
    note: str | None = None


def first_divergence(a: Sequence[int] | str, b: Sequence[int] | str) -> int | None:
    """None when equal; else the first position where they differ (the shorter's length if one is a prefix)."""
    if len(a) == len(b) and a == b:
        return None
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def divergence_stats(positions: Sequence[int | None]) -> DivergenceStats:
    """Per compared request, its first divergence (None: identical)."""
    diverged = [p for p in positions if p is not None]
    n = len(positions)
    if not diverged:
        return DivergenceStats(compared=n, differing=0, share=0.0 if n else None, first_divergence_median=None)
    qs = np.quantile(np.asarray(diverged, dtype=float), QUANTILES)
    return DivergenceStats(
        compared=n,
        differing=len(diverged),
        share=len(diverged) / n,
        first_divergence_median=float(np.median(diverged)),
        first_divergence_quantiles={f"p{round(q * 100)}": float(v) for q, v in zip(QUANTILES, qs)},
        first_divergence_min=min(diverged),
        first_divergence_max=max(diverged),
    )


def _content(o: Output, unit: Unit) -> Sequence[int] | str:
    if unit == "tokens":
        assert o.token_ids is not None
        return o.token_ids
    return o.text or ""


def segment_equivalence(baseline: Sequence[Output], candidate: Sequence[Output], segment: str) -> SegmentEquivalence:
    """The comparison of one segment's outputs (the caller passes that segment's successful requests)."""
    every = [*baseline, *candidate]
    unit: Unit = "tokens" if every and all(o.token_ids is not None for o in every) else "characters"
    note = None
    if unit == "characters" and every:
        arms = (("baseline", baseline), ("candidate", candidate))
        without = sorted({arm for arm, outputs in arms if any(o.token_ids is None for o in outputs)})
        note = (
            f"the {' and '.join(without)} server{'s' if len(without) > 1 else ''} returned no token ids "
            "(not vLLM, or older than return_token_ids): outputs compared as text, positions in characters"
        )
    reference: dict[int, Output] = {}
    for o in sorted(baseline, key=lambda o: (o.rep, o.seq)):
        reference.setdefault(o.item, o)
    ref_ids = {id(o) for o in reference.values()}

    def positions(outputs: Sequence[Output], skip_reference: bool) -> list[int | None]:
        return [
            first_divergence(_content(o, unit), _content(reference[o.item], unit))
            for o in outputs
            if o.item in reference and not (skip_reference and id(o) in ref_ids)
        ]

    return SegmentEquivalence(
        segment=segment,
        unit=unit,
        prompts=len(reference),
        baseline=divergence_stats(positions(baseline, True)),
        candidate=divergence_stats(positions(candidate, False)),
        note=note,
    )


def equivalence_by_segment(baseline: Sequence[Output], candidate: Sequence[Output]) -> dict[str, SegmentEquivalence]:
    """Per segment (sorted), the comparison of that segment's outputs."""
    segments = sorted({o.segment for o in (*baseline, *candidate)})
    return {
        seg: segment_equivalence([o for o in baseline if o.segment == seg], [o for o in candidate if o.segment == seg], seg)
        for seg in segments
    }
