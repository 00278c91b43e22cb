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
from dataclasses import dataclass

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
    # vLLM V0 (before 0.8's V1 engine), for comparing with V0-era measurements (docs/validation.md):
    # prefill_first: without chunked prefill V0's scheduler runs waiting prompts in prefill-only steps, decodes wait;
    # batch_expansion: V0's speculative scorer expanded each request into k + 1 sequences, each reading its context.
    prefill_first: bool = False
    batch_expansion: bool = False


@dataclass
class StepOutcome:
    """One step: who got how many tokens at its end, who got a first token, who finished.

    ``emit_ids``/``emit_tokens``: the requests that already had their first token, and their new tokens.
    ``first_ids``: requests that got their first token (one each) at the step's end. ``uniform_gap_s`` is set
    when every request in ``emit_ids`` had also emitted at the end of the step before, so each gap is the step's
    duration (the fast path's common case); otherwise ``gaps_s`` holds each one's gap since its last token.
    """

    start_s: float
    duration_s: float
    load: StepLoad
    decode_seqs: int
    k: int
    emit_ids: NDArray[np.int64]
    emit_tokens: NDArray[np.int64]
    uniform_gap_s: float | None
    gaps_s: NDArray[np.float64] | None
    first_ids: list[int]
    finished_ids: list[int]
    preempted: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: NDArray[np.int64] | None = None

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


class SimEngine:
    """One engine. ``add`` queues a request; ``step`` runs one step from ``clock``; ``idle``: nothing to run.

    Two paths give the same results: a fast one for steps where every running request decodes, nothing can be
    admitted and neither the token budget nor the KV pool can bind (most steps at a steady load), which does a
    handful of vector operations; and the full scheduler for the rest. Block counts are brought up to date lazily,
    with a bound that keeps the fast path from ever skipping a preemption.
    """

    def __init__(self, config: EngineConfig, step_time: StepTime, rng: np.random.Generator, fast_path: bool = True) -> None:
        self.cfg = config
        # off: every step through the full scheduler (the tests compare the two); V0's rules have only that path
        self.fast_path = fast_path and not (config.prefill_first or config.batch_expansion)
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
        self.last_t = np.zeros(n)  # when each request last emitted (NaN: not yet)
        self.n_run = 0
        self.n_prefill = 0  # running requests still prefilling
        self.free_blocks = config.num_kv_blocks
        self.unsynced_tokens = 0  # context grown on the fast path since blocks were last brought up to date
        self.ctx_sum = 0  # sum of ctx over running requests
        self.uniform = True  # every running request emitted at the end of the last step
        self.clock = 0.0
        self.waiting: deque[int] = deque()
        self.prompt: list[int] = []
        self.out_len: list[int] = []
        self.generated: list[int] = []
        self.preemptions = 0
        self.resume_t: dict[int, float] = {}  # a preempted request's last emission, for its next token's gap

    @property
    def running(self) -> int:
        return self.n_run

    @property
    def idle(self) -> bool:
        return self.n_run == 0 and not self.waiting

    @property
    def kv_usage(self) -> float:
        used = self.cfg.num_kv_blocks - self.free_blocks + self.unsynced_tokens / self.cfg.block_size
        return min(1.0, used / self.cfg.num_kv_blocks)

    def add(self, prompt_len: int, output_len: int) -> int:
        rid = len(self.prompt)
        self.prompt.append(prompt_len)
        self.out_len.append(max(1, output_len))
        self.generated.append(0)
        self.waiting.append(rid)
        return rid

    def _blocks_for(self, tokens: NDArray[np.int64]) -> NDArray[np.int64]:
        bs = self.cfg.block_size
        return (tokens + bs - 1) // bs

    def _sync_blocks(self, lookahead: int) -> None:
        """Grow each running request's blocks to its context (and lookahead) after fast steps."""
        if self.unsynced_tokens:
            n = self.n_run
            want = self._blocks_for(self.ctx[:n] + lookahead)
            extra = np.maximum(want - self.blocks[:n], 0)
            self.blocks[:n] += extra
            self.free_blocks -= int(extra.sum())
            self.unsynced_tokens = 0

    def _preempt_last(self) -> None:
        i = self.n_run - 1
        rid = int(self.rid[i])
        self.free_blocks += int(self.blocks[i])
        self.ctx_sum -= int(self.ctx[i])
        if self.ctx[i] < self.target[i]:
            self.n_prefill -= 1
        self.generated[rid] = self.out_len[rid] - int(self.left[i])
        self.resume_t[rid] = float(self.last_t[i])
        self.n_run -= 1
        self.waiting.appendleft(rid)
        self.preemptions += 1

    def _remove(self, keep: NDArray[np.bool_]) -> None:
        n = self.n_run
        m = int(keep.sum())
        for arr in (self.rid, self.ctx, self.target, self.left, self.blocks, self.last_t):
            arr[:m] = arr[:n][keep]
        self.n_run = m

    def _draw(self, n_dec: int, drafted: NDArray[np.int64]) -> tuple[NDArray[np.int64], int, int, int, NDArray[np.int64]]:
        """Accepted counts for the requests with a draft; (accepted, drafts, draft tokens, accepted total, per pos)."""
        accepted = np.zeros(len(drafted), I64)
        has = drafted > 0
        n_drafts = int(has.sum()) if n_dec else 0
        if not n_drafts or self.sampler is None:
            return accepted, 0, 0, 0, np.zeros(self.max_k, I64)
        draws = np.minimum(self.sampler.draw(n_drafts), drafted[has])
        accepted[has] = draws
        counts = np.bincount(draws, minlength=self.max_k + 1)
        per_pos = np.cumsum(counts[::-1])[::-1][1 : self.max_k + 1]
        return accepted, n_drafts, int(drafted.sum()), int(draws.sum()), per_pos

    def _k_now(self) -> tuple[int, int]:
        spec = self.cfg.speculation
        if spec is None:
            return 0, 0
        k = spec.schedule.at(max(self.n_run, 1))
        return k, min(spec.lookahead, k)

    def step(self) -> StepOutcome | None:
        if self.idle:
            return None
        k, lookahead = self._k_now()
        n = self.n_run
        spec = self.cfg.speculation
        fast = (
            self.fast_path
            and self.n_prefill == 0
            and n * (1 + k) <= self.cfg.max_num_batched_tokens
            and (spec is None or spec.draft_fraction >= 1.0)
            and not (self.waiting and self.generated[self.waiting[0]])  # a recompute goes through the full path
        )
        if fast:
            # no preemption possible: every request grows by at most 1 + k + lookahead tokens, one block more each
            bound = self.unsynced_tokens // self.cfg.block_size + n
            fast = self.free_blocks - bound >= n * self._blocks_per_step(k, lookahead)
        return self._fast_step(k, lookahead) if fast else self._full_step(k, lookahead)

    def _blocks_per_step(self, k: int, lookahead: int) -> int:
        return (1 + k + lookahead) // self.cfg.block_size + 2

    def _admit_fast(self, k: int, lookahead: int) -> list[int]:
        """Admit fresh requests into the budget left after the decodes; returns their first chunks."""
        cfg = self.cfg
        n = self.n_run
        budget_left = cfg.max_num_batched_tokens - n * (1 + k)
        self._sync_blocks(lookahead)
        reserve = n * self._blocks_per_step(k, lookahead)
        chunks: list[int] = []
        while self.waiting and budget_left > 0 and n + len(chunks) < cfg.max_num_seqs:
            rid = self.waiting[0]
            if self.generated[rid]:
                break
            full = self.prompt[rid]
            chunk = min(full, budget_left)
            if chunk < full and not cfg.chunked_prefill:
                break
            need_blocks = (chunk + cfg.block_size - 1) // cfg.block_size
            if need_blocks > self.free_blocks - reserve:
                break
            self.waiting.popleft()
            j = n + len(chunks)
            self.rid[j], self.ctx[j], self.target[j] = rid, chunk, full
            self.left[j], self.blocks[j], self.last_t[j] = self.out_len[rid], need_blocks, np.nan
            self.free_blocks -= need_blocks
            budget_left -= chunk
            chunks.append(chunk)
        return chunks

    def _fast_step(self, k: int, lookahead: int) -> StepOutcome:
        n = self.n_run
        spec = self.cfg.speculation
        chunks = self._admit_fast(k, lookahead) if self.waiting and n < self.cfg.max_num_seqs else []
        if not n and not chunks:
            return self._full_step(k, lookahead)  # nothing could be admitted: the full scheduler says why
        new_tokens = sum(chunks)
        load = StepLoad(
            n + len(chunks),
            n * (1 + k) + new_tokens,
            self.ctx_sum + n * (1 + k) + new_tokens,
            float(self.ctx_sum + n * (1 + k)) * (1 + k) + sum(c * (c + 1) / 2 for c in chunks),
        )
        duration = self.step_time(load)
        if spec is not None and k and n:
            duration += spec.proposer(n, k, self.ctx_sum + n)
        left = self.left[:n]
        drafts = draft_tokens = acc_total = 0
        per_pos = None
        if k and self.sampler is not None and n:
            draws = np.minimum(self.sampler.draw(n), k)
            drafts, draft_tokens, acc_total = n, n * k, int(draws.sum())
            emit = np.minimum(draws + 1, left)
            counts = np.bincount(draws, minlength=self.max_k + 1)
            per_pos = np.cumsum(counts[::-1])[::-1][1 : self.max_k + 1]
            self.ctx[:n] += draws + 1
        else:
            emit = np.minimum(1, left)
            self.ctx[:n] += 1
        grown = n + acc_total
        self.ctx_sum += grown + new_tokens
        self.unsynced_tokens += grown
        left -= emit
        start = self.clock
        self.clock = end = start + duration
        gap = duration if self.uniform else None
        gaps = None if self.uniform else end - self.last_t[:n]
        self.last_t[:n] = end
        ids = self.rid[:n].copy()
        first: list[int] = []
        if chunks:
            m = n + len(chunks)
            for j in range(n, m):
                if self.ctx[j] >= self.target[j]:
                    first.append(int(self.rid[j]))
                    self.left[j] -= 1
                    self.last_t[j] = end
                else:
                    self.n_prefill += 1
            self.n_run = m
            self.uniform = self.n_prefill == 0
        else:
            self.uniform = True
        finished: list[int] = []
        if self.n_run and self.left[: self.n_run].min() <= 0:
            finished = self._finish(self.left[: self.n_run] <= 0)
        return StepOutcome(
            start, duration, load, n, k, ids, emit, gap, gaps, first, finished, 0, drafts, draft_tokens, acc_total, per_pos
        )

    def _finish(self, done: NDArray[np.bool_]) -> list[int]:
        n = self.n_run
        _, lookahead = self._k_now()
        self._sync_blocks(lookahead)
        finished = [int(r) for r in self.rid[:n][done]]
        self.free_blocks += int(self.blocks[:n][done].sum())
        self.ctx_sum -= int(self.ctx[:n][done].sum())
        for rid in finished:
            self.generated[rid] = self.out_len[rid]
        self._remove(~done)
        return finished

    def _prefill_can_start(self, n: int) -> bool:
        """V0 without chunked prefill: the first waiting request fits the budget, the KV pool and a sequence slot."""
        if not self.waiting or n >= self.cfg.max_num_seqs:
            return False
        rid = self.waiting[0]
        full = self.prompt[rid] + self.generated[rid]
        return (
            full <= self.cfg.max_num_batched_tokens
            and (full + self.cfg.block_size - 1) // self.cfg.block_size <= self.free_blocks
        )

    def _full_step(self, k: int, lookahead: int) -> StepOutcome:
        cfg = self.cfg
        spec = cfg.speculation
        budget = cfg.max_num_batched_tokens
        self._sync_blocks(lookahead)
        n = self.n_run
        ctx, target, left, blocks = self.ctx[:n], self.target[:n], self.left[:n], self.blocks[:n]
        decoding = ctx >= target
        spec_tokens = np.zeros(n, I64)
        if k and n:
            if spec is not None and spec.draft_fraction < 1.0:
                spec_tokens[decoding & (self.rng.random(n) < spec.draft_fraction)] = k
            else:
                spec_tokens[decoding] = k
        need = np.where(decoding, 1 + spec_tokens, target - ctx)
        if cfg.prefill_first and self._prefill_can_start(n):
            need = np.where(decoding, 0, need)  # V0: this step prefills only
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
        # admit waiting requests into the rest of the budget (V1 admits none in a step that preempted)
        chunks: list[int] = []
        left_budget = budget - used
        while self.waiting and left_budget > 0 and n + len(chunks) < cfg.max_num_seqs and not preempted:
            rid = self.waiting[0]
            full = self.prompt[rid] + self.generated[rid]
            chunk = min(full, left_budget)
            if chunk < full and not cfg.chunked_prefill:
                break
            need_blocks = (chunk + cfg.block_size - 1) // cfg.block_size
            if need_blocks > self.free_blocks:
                break
            self.waiting.popleft()
            j = n + len(chunks)
            self.rid[j], self.ctx[j], self.target[j] = rid, 0, full
            self.left[j], self.blocks[j] = self.out_len[rid] - self.generated[rid], need_blocks
            self.last_t[j] = self.resume_t.pop(rid, np.nan)
            self.free_blocks -= need_blocks
            self.n_prefill += 1
            left_budget -= chunk
            chunks.append(chunk)
        m = n + len(chunks)
        self.n_run = m
        if chunks:
            ctx, target, left = self.ctx[:m], self.target[:m], self.left[:m]
            alloc = np.concatenate([alloc, np.asarray(chunks, I64)])
            decoding = np.concatenate([decoding, np.zeros(len(chunks), bool)])
            spec_tokens = np.concatenate([spec_tokens, np.zeros(len(chunks), I64)])
        scheduled = alloc > 0
        dec_sched = decoding & scheduled
        n_dec = int(dec_sched.sum())
        context = int((ctx + alloc)[scheduled].sum())
        pairs = float((alloc * (ctx + (alloc + 1) // 2)).sum())
        expanded_seqs = 0
        if cfg.batch_expansion and k:
            # each drafted request scores as 1 + its drafts sequences, each attending to its whole context
            expanded = np.where(dec_sched, alloc - 1, 0)
            context += int((expanded * (ctx + 1))[dec_sched].sum())
            expanded_seqs = int(expanded.sum())
        load = StepLoad(int(scheduled.sum()), int(alloc.sum()), context, pairs, expanded_seqs)
        if load.batched_tokens == 0:
            rid = self.waiting[0]
            raise SimulationError(
                f"request {rid} ({self.prompt[rid] + self.generated[rid]} tokens to prefill) cannot be scheduled: "
                f"the KV pool has {cfg.num_kv_blocks} blocks of {cfg.block_size} tokens"
                + ("" if cfg.chunked_prefill else f" and max_num_batched_tokens is {budget} without chunked prefill")
            )
        duration = self.step_time(load)
        if spec is not None and n_dec:
            duration += spec.proposer(n_dec, k, int((ctx + 1)[dec_sched].sum()))
        drafted = np.where(dec_sched, np.maximum(np.minimum(alloc - 1, spec_tokens), 0), 0) if k else np.zeros(m, I64)
        accepted, drafts, draft_tokens, acc_total, per_pos = self._draw(n_dec, drafted)
        new_ctx = np.where(dec_sched, ctx + 1 + accepted, ctx + alloc)
        completes_prefill = ~decoding & scheduled & (new_ctx >= target)
        emit = np.minimum(np.where(dec_sched, 1 + accepted, 0) + completes_prefill, left)
        self.ctx_sum += int((new_ctx - ctx).sum())
        ctx[:] = new_ctx
        left -= emit
        start = self.clock
        self.clock = end = start + duration
        emitting = emit > 0
        fresh = completes_prefill & np.isnan(self.last_t[:m])  # first tokens: reported in first_ids, not emit_ids
        later = emitting & ~fresh
        emit_ids = self.rid[:m][later].copy()
        gaps = end - self.last_t[:m][later]
        self.last_t[:m][emitting] = end
        first_ids = [int(r) for r in self.rid[:m][fresh]]
        self.n_prefill -= int(completes_prefill.sum())
        self.uniform = bool(emitting.all())
        finished = self._finish(left <= 0) if (left <= 0).any() else []
        return StepOutcome(
            start,
            duration,
            load,
            n_dec,
            k,
            emit_ids,
            emit[later],
            None,
            gaps,
            first_ids,
            finished,
            preempted,
            drafts,
            draft_tokens,
            acc_total,
            per_pos,
        )
