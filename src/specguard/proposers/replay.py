"""Replay logged requests under greedy verification, counting as vLLM counts (vllm-facts.md sections 3.4, 5). Pure.

The prefill step samples the first output token with no draft; every later
step drafts from the context so far (prompt + accepted output), accepts the
longest common prefix of the draft and the tokens the target really produced,
and emits accepted + 1 tokens. A step whose draft is empty is not a draft.
This is exact for greedy decoding; at temperature > 0 the logged tokens are
one sample, so the result is an upper bound on what rejection sampling keeps.

One blind spot: on a request's last step the draft can run past the last
logged token. vLLM verifies those tokens against what the target would have
generated next and counts the ones that match as accepted before it cuts the
output at max_tokens or the stop token; the log does not have them. They are
counted in ``past_end`` (when everything up to the end matched), so the true
accepted count lies between ``accepted`` and ``accepted + past_end``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypedDict

from pydantic import BaseModel, Field

from specguard.proposers.ngram import KnownSequenceDrafts
from specguard.proposers.suffix import SuffixCache

if TYPE_CHECKING:
    from specguard.proposers.arctic import ArcticSuffixCache

# One request's proposer: called with the accepted context, returns the draft.
Proposer = Callable[[list[int]], list[int]]


class Rates(TypedDict):
    """The derived rates of a ReplayStats, keyed as the result models that carry them name their fields."""

    acceptance_rate: float | None
    acceptance_rate_upper: float | None
    mean_acceptance_length: float | None
    per_position: list[float]
    draft_fraction: float | None
    step_reduction: float | None


class ReplayStats(BaseModel):
    """Additive counts over requests; the rates are derived from them."""

    requests: int = 0
    output_tokens: int = 0
    steps: int = Field(default=0, description="decode steps with speculation (after the prefill step)")
    baseline_steps: int = Field(default=0, description="decode steps without: one per output token after the first")
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = Field(default_factory=list)
    past_end: int = Field(
        default=0,
        description="draft tokens past the logged output on a final step that matched "
        "to the end: vLLM verifies them against tokens the log does not have (see replay())",
    )

    def add(self, other: ReplayStats) -> ReplayStats:
        width = max(len(self.accepted_per_pos), len(other.accepted_per_pos))

        def pad(xs: list[int]) -> list[int]:
            return xs + [0] * (width - len(xs))

        return ReplayStats(
            requests=self.requests + other.requests,
            output_tokens=self.output_tokens + other.output_tokens,
            steps=self.steps + other.steps,
            baseline_steps=self.baseline_steps + other.baseline_steps,
            drafts=self.drafts + other.drafts,
            draft_tokens=self.draft_tokens + other.draft_tokens,
            accepted=self.accepted + other.accepted,
            past_end=self.past_end + other.past_end,
            accepted_per_pos=[a + b for a, b in zip(pad(self.accepted_per_pos), pad(other.accepted_per_pos))],
        )

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / draft tokens, as vLLM's spec_decode counters define it."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts: tokens per drafted step, the bonus token included (vLLM 0.9+)."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def per_position(self) -> list[float]:
        """P(first i+1 draft tokens accepted), per draft; unconditional like vLLM's per-position rate."""
        return [a / self.drafts for a in self.accepted_per_pos] if self.drafts else []

    @property
    def draft_fraction(self) -> float | None:
        return self.drafts / self.steps if self.steps else None

    @property
    def step_reduction(self) -> float | None:
        """Fraction of target-model decode steps saved (1 - steps with / steps without)."""
        return 1 - self.steps / self.baseline_steps if self.baseline_steps else None

    @property
    def acceptance_rate_upper(self) -> float | None:
        """The rate if every draft token past the logged end had matched (see ``past_end``)."""
        return (self.accepted + self.past_end) / self.draft_tokens if self.draft_tokens else None

    def rates(self) -> Rates:
        return {
            "acceptance_rate": self.acceptance_rate,
            "acceptance_rate_upper": self.acceptance_rate_upper,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_position": self.per_position,
            "draft_fraction": self.draft_fraction,
            "step_reduction": self.step_reduction,
        }


def replay(
    prompt: Sequence[int],
    output: Sequence[int],
    propose: Callable[[int], list[int]],
    advance: Callable[[Sequence[int]], None] | None = None,
) -> ReplayStats:
    """One request: ``advance`` appends tokens to the proposer's context, ``propose(pos)`` drafts from it."""
    if not output:
        return ReplayStats(requests=1)
    seq = list(prompt) + list(output)
    end = len(seq)
    pos = len(prompt) + 1  # the prefill step sampled the first output token
    if advance is not None:
        advance(seq[:pos])
    per_pos: list[int] = []
    steps = drafts = draft_tokens = accepted_total = past_end = 0
    # Plain locals, not model fields: this loop runs once per decode step of every logged request.
    while pos < end:
        draft = propose(pos)
        accepted = 0
        if draft:
            for d, a in zip(draft, seq[pos : pos + len(draft)]):
                if d != a:
                    break
                accepted += 1
            drafts += 1
            draft_tokens += len(draft)
            accepted_total += accepted
            if accepted == end - pos and len(draft) > accepted:
                past_end += len(draft) - accepted
            if len(per_pos) < len(draft):
                per_pos += [0] * (len(draft) - len(per_pos))
            for i in range(accepted):
                per_pos[i] += 1
        steps += 1
        new_pos = min(end, pos + accepted + 1)
        if advance is not None:
            advance(seq[pos:new_pos])
        pos = new_pos
    return ReplayStats(
        requests=1,
        output_tokens=len(output),
        baseline_steps=len(output) - 1,
        steps=steps,
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted=accepted_total,
        past_end=past_end,
        accepted_per_pos=per_pos,
    )


def replay_ngram(prompt: Sequence[int], output: Sequence[int], min_n: int, max_n: int, k: int, max_model_len: int) -> ReplayStats:
    return replay_ngram_sweep(prompt, output, min_n, max_n, [k], max_model_len)[k]


def replay_suffix(
    cache: SuffixCache | ArcticSuffixCache, req_id: str, prompt: Sequence[int], output: Sequence[int], max_model_len: int
) -> ReplayStats:
    """One request through a shared suffix cache: earlier requests' responses are in its global tree."""
    started = False

    def advance(tokens: Sequence[int]) -> None:
        nonlocal started
        if not started:
            cache.start_request(req_id, tokens[: len(prompt)])
            cache.add_response(req_id, tokens[len(prompt) :], max_model_len)
            started = True
        else:
            cache.add_response(req_id, tokens, max_model_len)

    try:
        return replay(prompt, output, lambda _pos: cache.speculate(req_id, max_model_len), advance)
    finally:
        cache.stop_request(req_id)


def replay_ngram_sweep(
    prompt: Sequence[int], output: Sequence[int], min_n: int, max_n: int, ks: Sequence[int], max_model_len: int
) -> dict[int, ReplayStats]:
    """One request under several k at once, sharing the request's candidate places."""
    drafts = KnownSequenceDrafts(list(prompt) + list(output), min_n, max_n, len(prompt) + 1)
    return {k: _replay_known(drafts, len(prompt), len(output), k, max_model_len) for k in ks}


def _replay_known(drafts: KnownSequenceDrafts, prompt_len: int, output_len: int, k: int, max_model_len: int) -> ReplayStats:
    """``replay`` with the n-gram proposal inlined: the same steps and counts, without a call per step.

    The candidate scan repeats ``KnownSequenceDrafts.propose_at`` on purpose: calling it (or a shared helper)
    once per step costs about 6%, enough to fall behind vLLM's compiled proposer on natural text
    (bench/acceptance_replay.py). test_proposers holds the two to the same answers on random requests.
    """
    if not output_len:
        return ReplayStats(requests=1)
    seq, keys, starts = drafts.tokens, drafts.keys, drafts.starts
    min_n, max_n, last = drafts.min_n, drafts.max_n, drafts.min_n - 1
    end = prompt_len + output_len
    pos = prompt_len + 1  # the prefill step sampled the first output token
    per_pos: list[int] = []
    steps = drafts_n = draft_tokens = accepted_total = past_end = 0
    while pos < end:
        steps += 1
        accepted = 0
        kk = min(k, max_model_len - pos)
        places = starts.get(keys[pos - min_n]) if pos >= min_n and kk > 0 else None
        best_end = -1
        if places:
            best_len, tail = 0, pos - 1
            for begin in places:
                e = begin + last
                if e >= tail:
                    break
                m = min_n
                while m < max_n and e - m >= 0 and seq[e - m] == seq[tail - m]:
                    m += 1
                if m > best_len:
                    best_len, best_end = m, e
                    if m == max_n:
                        break
        if best_end >= 0:
            begin = best_end + 1
            n = min(kk, pos - begin)
            for i in range(n):
                if pos + i >= end or seq[begin + i] != seq[pos + i]:
                    break
                accepted += 1
            drafts_n += 1
            draft_tokens += n
            accepted_total += accepted
            if accepted == end - pos and n > accepted:
                past_end += n - accepted
            if len(per_pos) < n:
                per_pos += [0] * (n - len(per_pos))
            for i in range(accepted):
                per_pos[i] += 1
        pos = min(end, pos + accepted + 1)
    return ReplayStats(
        requests=1,
        output_tokens=output_len,
        baseline_steps=output_len - 1,
        steps=steps,
        drafts=drafts_n,
        draft_tokens=draft_tokens,
        accepted=accepted_total,
        past_end=past_end,
        accepted_per_pos=per_pos,
    )
