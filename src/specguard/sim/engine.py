"""A vLLM V1 engine, step by step: continuous batching, chunked prefill, KV blocks, preemption, speculation.

Each ``step()`` does what V1's scheduler and model runner do once:

1. Running requests, in admission order, take tokens from the
   ``max_num_batched_tokens`` budget: a decoding request 1 + k (its last
   token and k draft tokens), a prefilling one what is left of its prompt.
2. Their KV blocks (``block_size`` tokens each) grow to cover context, new
   tokens and the method's lookahead slots. When the pool runs out, the last
   admitted running request is preempted: its blocks are freed and it goes
   back to the front of the queue, to recompute its prompt and output so far.
3. Waiting requests are admitted while the budget, ``max_num_seqs`` and the
   free blocks allow; with chunked prefill a prompt may take part of the budget
   and finish in later steps.
4. The step lasts the step-time model's answer plus the proposer's cost. Each
   decoding request then emits 1 + accepted tokens (accepted drawn from the
   per-position rates, see ``acceptance``); a prefill that completes emits its
   first token.

Prefix caching, priorities and structured output are not modelled. Arrays of
the running requests are numpy, so a step costs a few dozen vector operations
whatever the batch size (``bench/sim_speed.py`` measures it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from specguard.errors import UsageError
from specguard.sim.acceptance import AcceptedSampler
from specguard.sim.step_time import ProposerCost, StepLoad, StepTime

I64 = np.int64


class SimulationError(UsageError):
    """A simulated configuration that cannot serve its workload at all (a request larger than the KV pool)."""


@dataclass(frozen=True)
class KSchedule:
    """k by batch size: vLLM's ``num_speculative_tokens_per_batch_size`` ([start, end, k], inclusive), else fixed k."""

    k: int
    bands: tuple[tuple[int, int, int], ...] = ()

    def at(self, batch: int) -> int:
        for start, end, k in self.bands:
            if start <= batch <= end:
                return k
        return self.k


@dataclass(frozen=True)
class Speculation:
    method: str
    schedule: KSchedule
    rates: list[float]  # per-position acceptance for the largest k
    lookahead: int  # KV slots reserved per decoding request beyond its new tokens (k for draft models, 0 for n-gram)
    proposer: ProposerCost
    draft_fraction: float = 1.0  # share of decode steps that get a draft (n-gram finds no match in the others)


@dataclass(frozen=True)
class EngineConfig:
    num_kv_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    speculation: Speculation | None = None


@dataclass
class StepOutcome:
    """One step's effect: who got how many tokens at its end, who got a first token, who finished."""

    duration_s: float
    load: StepLoad
    decode_seqs: int
    k: int
    emit_ids: NDArray[np.int64]
    emit_tokens: NDArray[np.int64]
    first_ids: list[int]
    finished_ids: list[int]
    resumed_ids: list[int]  # requests whose token came at the end of a recompute after preemption
    preempted: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class SimEngine:
    """One engine. ``add`` queues a request; ``step`` runs one step; ``idle`` says there is nothing to run."""

    def __init__(self, config: EngineConfig, step_time: StepTime, rng: np.random.Generator) -> None:
        self.cfg = config
        self.step_time = step_time
        spec = config.speculation
        self.sampler = AcceptedSampler(spec.rates, rng) if spec else None
        self.rng = rng
        self.max_k = max([spec.schedule.k, *(b[2] for b in spec.schedule.bands)]) if spec else 0
        n = config.max_num_seqs
        # running requests occupy slots [0, n_run) in admission order
        self.rid = np.zeros(n, I64)
        self.ctx = np.zeros(n, I64)  # tokens whose KV is computed
        self.target = np.zeros(n, I64)  # context needed before the next token is sampled (prompt, or prompt + output)
        self.left = np.zeros(n, I64)  # output tokens still to generate
        self.blocks = np.zeros(n, I64)
        self.n_run = 0
        self.free_blocks = config.num_kv_blocks
        self.waiting: deque[int] = deque()
        self.prompt: list[int] = []
        self.out_len: list[int] = []
        self.generated: list[int] = []
        self.preemptions = 0

    @property
    def running(self) -> int:
        return self.n_run

    @property
    def idle(self) -> bool:
        return self.n_run == 0 and not self.waiting

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.cfg.num_kv_blocks

    def add(self, prompt_len: int, output_len: int) -> int:
        rid = len(self.prompt)
        self.prompt.append(prompt_len)
        self.out_len.append(max(1, output_len))
        self.generated.append(0)
        self.waiting.append(rid)
        return rid

    def _blocks_for(self, tokens: NDArray[np.int64] | int) -> NDArray[np.int64] | int:
        bs = self.cfg.block_size
        return (tokens + bs - 1) // bs

    def _preempt_last(self) -> None:
        i = self.n_run - 1
        rid = int(self.rid[i])
        self.free_blocks += int(self.blocks[i])
        self.generated[rid] = self.out_len[rid] - int(self.left[i])
        self.n_run -= 1
        self.waiting.appendleft(rid)
        self.preemptions += 1

    def _remove(self, keep: NDArray[np.bool_]) -> None:
        n = self.n_run
        m = int(keep.sum())
        for arr in (self.rid, self.ctx, self.target, self.left, self.blocks):
            arr[:m] = arr[:n][keep]
        self.n_run = m

    def step(self) -> StepOutcome | None:
        if self.idle:
            return None
        cfg = self.cfg
        spec = cfg.speculation
        budget = cfg.max_num_batched_tokens
        n = self.n_run
        k = spec.schedule.at(max(n, 1)) if spec else 0
        lookahead = min(spec.lookahead, k) if spec else 0
        ctx, target, left, blocks = self.ctx[:n], self.target[:n], self.left[:n], self.blocks[:n]
        decoding = ctx >= target
        spec_tokens = np.zeros(n, I64)
        if k and n:
            if spec is not None and spec.draft_fraction < 1.0:
                spec_tokens[decoding & (self.rng.random(n) < spec.draft_fraction)] = k
            else:
                spec_tokens[decoding] = k
        need = np.where(decoding, 1 + spec_tokens, target - ctx)
        before = np.cumsum(need) - need
        alloc = np.clip(budget - before, 0, need)
        want = self._blocks_for(ctx + alloc + np.where(decoding & (alloc > 0), lookahead, 0))
        extra = np.maximum(want - blocks, 0)
        preempted = 0
        total_extra = int(extra.sum())
        while total_extra > self.free_blocks and self.n_run > 0:
            total_extra -= int(extra[self.n_run - 1])
            self._preempt_last()
            preempted += 1
        if preempted:
            n = self.n_run
            ctx, target, left, blocks = ctx[:n], target[:n], left[:n], blocks[:n]
            decoding, spec_tokens, alloc, extra = decoding[:n], spec_tokens[:n], alloc[:n], extra[:n]
        self.free_blocks -= total_extra
        blocks += extra
        used = int(alloc.sum())
        first_ids: list[int] = []
        resumed_ids: list[int] = []
        # admit waiting requests into the rest of the budget
        new_slots = 0
        chunks: list[int] = []
        left_budget = budget - used
        while self.waiting and left_budget > 0 and n + new_slots < cfg.max_num_seqs and not preempted:
            rid = self.waiting[0]
            full = self.prompt[rid] + self.generated[rid]
            chunk = min(full, left_budget)
            if chunk < full and not cfg.chunked_prefill:
                break
            need_blocks = int(self._blocks_for(chunk))
            if need_blocks > self.free_blocks:
                break
            self.waiting.popleft()
            j = n + new_slots
            self.rid[j], self.ctx[j], self.target[j] = rid, 0, full
            self.left[j], self.blocks[j] = self.out_len[rid] - self.generated[rid], need_blocks
            self.free_blocks -= need_blocks
            left_budget -= chunk
            chunks.append(chunk)
            new_slots += 1
        m = n + new_slots
        self.n_run = m
        # the admitted ones join the vectors with their first chunk allotted
        if new_slots:
            ctx, target, left = self.ctx[:m], self.target[:m], self.left[:m]
            alloc = np.concatenate([alloc, np.asarray(chunks, I64)])
            decoding = np.concatenate([decoding, np.zeros(new_slots, bool)])
            spec_tokens = np.concatenate([spec_tokens, np.zeros(new_slots, I64)])
        scheduled = alloc > 0
        dec_sched = decoding & scheduled
        n_dec = int(dec_sched.sum())
        context = int((ctx + alloc)[scheduled].sum())
        pairs = float((alloc * (ctx + (alloc + 1) // 2)).sum())
        load = StepLoad(int(scheduled.sum()), int(alloc.sum()), context, pairs)
        if load.batched_tokens == 0:
            rid = self.waiting[0]
            raise SimulationError(
                f"request {rid} ({self.prompt[rid] + self.generated[rid]} tokens to prefill) cannot be scheduled: "
                f"the KV pool has {self.cfg.num_kv_blocks} blocks of {self.cfg.block_size} tokens"
                + ("" if cfg.chunked_prefill else f" and max_num_batched_tokens is {budget} without chunked prefill")
            )
        duration = self.step_time(load)
        if spec is not None and n_dec:
            duration += spec.proposer(n_dec, k, int((ctx + 1)[dec_sched].sum()))
        # results of the step
        drafted = np.minimum(alloc - 1, spec_tokens) if k else np.zeros(m, I64)
        drafted = np.where(dec_sched, np.maximum(drafted, 0), 0)
        accepted = np.zeros(m, I64)
        drafts = draft_tokens = acc_total = 0
        per_pos = np.zeros(self.max_k, I64)
        if k and self.sampler is not None and n_dec:
            has_draft = drafted > 0
            n_drafts = int(has_draft.sum())
            if n_drafts:
                draws = np.minimum(self.sampler.draw(n_drafts), drafted[has_draft])
                accepted[has_draft] = draws
                drafts, draft_tokens, acc_total = n_drafts, int(drafted.sum()), int(draws.sum())
                counts = np.bincount(draws, minlength=self.max_k + 1)
                per_pos = np.cumsum(counts[::-1])[::-1][1 : self.max_k + 1]
        new_ctx = ctx + np.where(dec_sched, 1 + accepted, alloc)
        completes_prefill = ~decoding & scheduled & (new_ctx >= target)
        emit = np.where(dec_sched, 1 + accepted, 0) + completes_prefill
        emit = np.minimum(emit, left)
        ctx[:] = np.where(dec_sched, ctx + 1 + accepted, new_ctx)
        left -= emit
        emitting = emit > 0
        emit_ids = self.rid[:m][emitting].copy()
        emit_tokens = emit[emitting]
        if completes_prefill.any():
            for j in np.flatnonzero(completes_prefill):
                rid = int(self.rid[j])
                (resumed_ids if self.generated[rid] else first_ids).append(rid)
        done = left <= 0
        finished_ids: list[int] = []
        if done.any():
            finished_ids = [int(r) for r in self.rid[:m][done]]
            self.free_blocks += int(self.blocks[:m][done].sum())
            for rid in finished_ids:
                self.generated[rid] = self.out_len[rid]
            self._remove(~done)
        return StepOutcome(
            duration_s=duration,
            load=load,
            decode_seqs=n_dec,
            k=k,
            emit_ids=emit_ids,
            emit_tokens=emit_tokens,
            first_ids=first_ids,
            finished_ids=finished_ids,
            resumed_ids=resumed_ids,
            preempted=preempted,
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=acc_total,
            accepted_per_pos=per_pos,
        )

