"""Two suffix caches driven through the same calls, as vLLM's runner makes them, drafts compared at every step. Pure.

Requests run in a rolling batch of ``in_flight`` at a time, as vLLM's
``SuffixDecodingProposer.propose`` sees them: each step, every request in the
batch gets its newly sampled tokens (``add_response``) and is asked for a
draft (``speculate``); a request that finished is stopped after its last step. Verification is
greedy against the request's logged output, with the reference cache's
draft, so both caches always receive identical calls even after a mismatch.
Stopping a request only drops its local tree, so when in the step it happens
does not change any later draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel


class DraftCache(Protocol):
    def start_request(self, req_id: str, prompt: Sequence[int]) -> None: ...
    def add_response(self, req_id: str, tokens: Sequence[int], max_model_len: int | None = None) -> None: ...
    def speculate(self, req_id: str, max_model_len: int) -> list[int]: ...
    def stop_request(self, req_id: str) -> None: ...


class _Live:
    def __init__(self, req_id: str, output: list[int]):
        self.req_id, self.output, self.pos, self.sampled = req_id, output, 1, output[:1]


class DiffResult(BaseModel):
    steps: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    mismatches: int = 0
    first_mismatch: str | None = None


def drive(
    reference: DraftCache,
    candidate: DraftCache,
    requests: Sequence[tuple[str, list[int], list[int]]],
    max_model_len: int,
    in_flight: int = 1,
) -> DiffResult:
    """Replay ``(req_id, prompt, output)`` requests through both caches; count the steps whose drafts differ."""
    res = DiffResult()
    queue = list(reversed(requests))
    batch: list[_Live] = []
    finished: list[str] = []
    while queue or batch:
        while queue and len(batch) < in_flight:
            req_id, prompt, output = queue.pop()
            if not output:
                continue
            for cache in (reference, candidate):
                cache.start_request(req_id, prompt)
            batch.append(_Live(req_id, output))
        still: list[_Live] = []
        for item in batch:
            req_id, output, pos, sampled = item.req_id, item.output, item.pos, item.sampled
            for cache in (reference, candidate):
                cache.add_response(req_id, sampled, max_model_len)
            want = reference.speculate(req_id, max_model_len)
            got = candidate.speculate(req_id, max_model_len)
            res.steps += 1
            if want != got:
                res.mismatches += 1
                if res.first_mismatch is None:
                    res.first_mismatch = f"step {res.steps}, request {req_id} at output {pos}: reference {want}, got {got}"
            if pos >= len(output):
                finished.append(req_id)
                continue
            accepted = 0
            for d, a in zip(want, output[pos:]):
                if d != a:
                    break
                accepted += 1
            if want:
                res.drafts += 1
                res.draft_tokens += len(want)
                res.accepted += accepted
            new_pos = min(len(output), pos + accepted + 1)
            item.pos, item.sampled = new_pos, output[pos:new_pos]
            still.append(item)
        for req_id in finished:
            for cache in (reference, candidate):
                cache.stop_request(req_id)
        finished = []
        batch = still
    return res
