"""The engine in real time: one task steps the simulated engine and hands each step's tokens out when the step ends.

The loop takes one ``SimEngine.step()``, sleeps until that step's end in wall time (its simulated duration x
``time_scale`` after it began), then puts each request's new tokens on its queue. Requests that arrive during a
step wait for the next one, as vLLM's scheduler admits them at step boundaries.

The engine's clock follows the wall loosely. Each step costs this loop about 1.4 ms of its own (the engine
step, the deliveries, the wake-up; measured with 8 streams on a 2-core machine: 33.0 ms wall per 31.6 ms
simulated step when the clock was moved up to now before every step), so steps are timed from the simulated
clock and the loop catches up by sleeping less. Only when it falls more than ``MAX_LAG_S`` behind (after an
idle spell, or on a machine too busy to keep up) is the clock moved up to now, so that it never runs a burst
of steps with no sleep to catch up on.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from specguard.sim.engine import SimEngine, SimulationError
from specguard.sim.serve_metrics import SimMetrics

MAX_LAG_S = 0.05  # wall seconds the loop may run behind the simulated clock before the clock is moved up


@dataclass
class Delivery:
    """One step's news for one request: new tokens (0 or more), and whether the request is finished."""

    tokens: int
    done: bool
    error: str | None = None


@dataclass
class Stream:
    prompt_tokens: int
    output_tokens: int
    arrived: float  # monotonic s
    queue: asyncio.Queue[Delivery] = field(default_factory=asyncio.Queue)
    first: float | None = None
    last: float | None = None
    sent: int = 0
    abandoned: bool = False  # the client went away: the engine runs the request on, its tokens go nowhere


class EngineLoop:
    def __init__(self, engine: SimEngine, metrics: SimMetrics, time_scale: float = 1.0) -> None:
        self.engine = engine
        self.metrics = metrics
        self.time_scale = time_scale
        self.streams: dict[int, Stream] = {}
        self.wake = asyncio.Event()
        self.t0 = time.monotonic()
        self.steps = 0
        self.failed: str | None = None

    def fits(self, prompt_tokens: int, output_tokens: int) -> bool:
        """Whether a request's whole context fits the KV pool (one that does not would stall the engine forever)."""
        cfg = self.engine.cfg
        return math.ceil((prompt_tokens + output_tokens + self.engine.max_k) / cfg.block_size) <= cfg.num_kv_blocks

    def submit(self, prompt_tokens: int, output_tokens: int) -> Stream:
        stream = Stream(prompt_tokens, output_tokens, time.monotonic())
        rid = self.engine.add(prompt_tokens, output_tokens)
        self.streams[rid] = stream
        self.wake.set()
        return stream

    def abandon(self, stream: Stream) -> None:
        """A client that went away: counted as vLLM counts an abort, at once; its tokens are dropped from now on.

        The engine has no abort, so the request keeps its batch slot and KV blocks to its end (a vLLM would free them).
        """
        if not stream.abandoned:
            stream.abandoned = True
            self.metrics.aborted.inc()

    def _sim_now(self) -> float:
        return (time.monotonic() - self.t0) / self.time_scale

    async def run(self) -> None:
        while True:
            if self.engine.idle:
                self.wake.clear()
                await self.wake.wait()
            now = self._sim_now()
            if now - self.engine.clock > MAX_LAG_S / self.time_scale:
                self.engine.clock = now
            try:
                out = self.engine.step()
            except SimulationError as exc:  # admission checks ``fits``; kept so that a bug fails requests, not the loop
                self._fail_all(str(exc))
                continue
            if out is None:
                continue
            self.steps += 1
            delay = self.t0 + out.end_s * self.time_scale - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self._deliver(out.first_ids, out.emit_ids.tolist(), out.emit_tokens.tolist(), out.finished_ids)
            self.metrics.step(out)

    def _deliver(self, first: list[int], emit_ids: list[int], emit_tokens: list[int], finished: list[int]) -> None:
        now = time.monotonic()
        m = self.metrics
        news: dict[int, int] = dict.fromkeys(first, 1)
        for rid, n in zip(emit_ids, emit_tokens, strict=True):
            if n:
                news[rid] = news.get(rid, 0) + n
        done = set(finished)
        for rid in first:
            s = self.streams.get(rid)
            if s is not None and not s.abandoned:
                m.ttft.observe(now - s.arrived)
                m.prompt_tokens.inc(s.prompt_tokens)
                s.first = now
        for rid, n in news.items():
            s = self.streams.get(rid)
            if s is None or s.abandoned:
                continue
            if s.last is not None:
                m.itl.observe(now - s.last)
            s.last = now
            s.sent += n
            s.queue.put_nowait(Delivery(n, rid in done))
        for rid in done:
            s = self.streams.pop(rid, None)
            if s is None or s.abandoned:
                continue
            if rid not in news:
                s.queue.put_nowait(Delivery(0, True))
            m.success.inc()
            m.e2e.observe(now - s.arrived)
            if s.first is not None and s.sent > 1:
                m.tpot.observe((now - s.first) / (s.sent - 1))

    def _fail_all(self, message: str) -> None:
        self.failed = message
        for s in self.streams.values():
            s.queue.put_nowait(Delivery(0, True, message))
        self.streams.clear()
        # a fresh engine: the failed one still holds the request it could not schedule
        self.engine = SimEngine(self.engine.cfg, self.engine.step_time, self.engine.rng)
        self.metrics.engine = self.engine
