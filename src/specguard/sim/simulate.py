"""Run one engine over one arrival stream and measure it as a client at the engine would: ``simulate_arm``.

Time is simulated: each request arrives at its offset, is queued at once, and
its tokens are "received" at the end of the step that emits them. Per-token
ITL spreads each gap over the tokens of the step that ends it, as specguard
measures real servers; per-token values go to a log-binned histogram (0.1 %
bins), so an hour of traffic at 10 requests/s keeps no per-token array.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from specguard.sim.engine import EngineConfig, SimEngine, StepOutcome
from specguard.sim.results import ArmMetrics, Percentiles
from specguard.sim.step_time import StepTime

LOG_BIN = math.log(1.001)  # 0.1 % bins
LOG_MIN = math.log(1e-6)  # 1 us
N_BINS = int((math.log(1e4) - LOG_MIN) / LOG_BIN) + 2  # up to 10,000 s
FLUSH_EVERY = 2048  # steps between histogram updates
SATURATED_SHARE = 0.95


class LogHistogram:
    """Weighted values in 0.1 % log bins; percentiles come back as bin centres."""

    def __init__(self, max_tokens_per_step: int = 1) -> None:
        self.width = max_tokens_per_step + 1
        self._uniform_gap: list[float] = []
        self._uniform_counts: list[NDArray[np.int64]] = []
        self.counts = np.zeros(N_BINS, dtype=np.float64)
        self._idx: list[NDArray[np.int64]] = []
        self._w: list[NDArray[np.int64]] = []

    def add(self, values_s: NDArray[np.float64], weights: NDArray[np.int64]) -> None:
        self._idx.append(self._bin(values_s))
        self._w.append(weights)
        if len(self._idx) >= FLUSH_EVERY:
            self.flush()

    @staticmethod
    def _bin(values_s: NDArray[np.float64]) -> NDArray[np.int64]:
        idx = ((np.log(np.maximum(values_s, 1e-6)) - LOG_MIN) / LOG_BIN).astype(np.int64)
        return np.minimum(idx, N_BINS - 1)

    def add_uniform(self, gap_s: float, tokens: NDArray[np.int64]) -> None:
        """Every emitting request waited ``gap_s``: a request's e tokens are e values of gap / e (kept for flush)."""
        self._uniform_gap.append(gap_s)
        self._uniform_counts.append(np.bincount(tokens, minlength=self.width))
        if len(self._uniform_gap) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self._uniform_gap:
            gaps, rows = np.asarray(self._uniform_gap), np.vstack(self._uniform_counts)
            self._uniform_gap, self._uniform_counts = [], []
            e = np.arange(rows.shape[1])
            nz = rows > 0
            values = (gaps[:, None] / np.maximum(e, 1)[None, :])[nz]
            self._idx.append(self._bin(values))
            self._w.append((rows * e[None, :])[nz])
        if self._idx:
            idx, w = np.concatenate(self._idx), np.concatenate(self._w)
            self.counts += np.bincount(idx, weights=w, minlength=N_BINS)
            self._idx, self._w = [], []

    def summary(self) -> Percentiles:
        self.flush()
        total = self.counts.sum()
        if total <= 0:
            return Percentiles(p50=None, p90=None, p99=None, mean=None)
        centres = np.exp(LOG_MIN + (np.arange(N_BINS) + 0.5) * LOG_BIN) * 1e3
        cum = np.cumsum(self.counts) / total

        def q(p: float) -> float:
            return round(float(centres[int(np.searchsorted(cum, p))]), 4)

        return Percentiles(p50=q(0.5), p90=q(0.9), p99=q(0.99), mean=round(float((centres * self.counts).sum() / total), 4))


class _Tally:
    """Per-step counters of one arm."""

    def __init__(self) -> None:
        self.steps = 0
        self.step_total = 0.0
        self.batch_total = 0
        self.preemptions = 0
        self.drafts = 0
        self.accepted = 0
        self.kv_max = 0.0
        self.tokens_in_window = 0

    def add(self, out: StepOutcome, kv_usage: float) -> None:
        self.steps += 1
        self.step_total += out.duration_s
        self.batch_total += out.load.seqs
        self.preemptions += out.preempted
        self.drafts += out.drafts
        self.accepted += out.accepted_tokens
        if kv_usage > self.kv_max:
            self.kv_max = kv_usage


def _percentiles_ms(values_s: NDArray[np.float64]) -> Percentiles:
    if len(values_s) == 0:
        return Percentiles(p50=None, p90=None, p99=None, mean=None)
    p50, p90, p99 = np.percentile(values_s, [50, 90, 99]) * 1e3
    return Percentiles(
        p50=round(float(p50), 4), p90=round(float(p90), 4), p99=round(float(p99), 4), mean=round(float(values_s.mean() * 1e3), 4)
    )


def simulate_arm(
    config: EngineConfig,
    step_time: StepTime,
    arrivals_s: NDArray[np.float64],
    prompt_lens: NDArray[np.int64],
    output_lens: NDArray[np.int64],
    warmup_s: float,
    seed: int = 0,
    fast_path: bool = True,
    concurrency: int | None = None,
) -> ArmMetrics:
    """Simulate the arrivals to the end (every request finished) and measure those arriving after ``warmup_s``.

    With ``concurrency``, the load is closed-loop as ``bench --concurrency`` makes it: that many requests are in
    flight from the start, and each finish sends the next at once; ``arrivals_s`` then only gives their number.
    """
    engine = SimEngine(config, step_time, np.random.default_rng(seed), fast_path)
    n = len(arrivals_s)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    if concurrency is not None:
        arrivals_s = np.full(n, np.inf)
        arrivals_s[: min(concurrency, n)] = 0.0
    measured = arrivals_s >= warmup_s
    window_end = float(arrivals_s[-1]) if n else 0.0
    spec = config.speculation
    itl = LogHistogram(1 + (max([spec.schedule.k, *(b[2] for b in spec.schedule.bands)]) if spec else 0))
    tally = _Tally()
    nxt = 0
    while nxt < n or not engine.idle:
        if engine.idle:
            engine.clock = max(engine.clock, float(arrivals_s[nxt]))
        now = engine.clock
        while nxt < n and arrivals_s[nxt] <= now:
            engine.add(int(prompt_lens[nxt]), int(output_lens[nxt]))
            nxt += 1
        out = engine.step()
        if out is None:
            continue
        end = out.end_s
        tally.add(out, engine.kv_usage)
        if warmup_s <= end <= window_end:
            tally.tokens_in_window += int(out.emit_tokens.sum())
        if end >= warmup_s:
            if out.uniform_gap_s is not None:
                itl.add_uniform(out.uniform_gap_s, out.emit_tokens)
            elif out.gaps_s is not None and len(out.gaps_s):
                later = ~np.isnan(out.gaps_s)
                itl.add(out.gaps_s[later] / out.emit_tokens[later], out.emit_tokens[later])
        if out.first_ids:
            first[np.asarray(out.first_ids, dtype=np.int64)] = end
        if out.finished_ids:
            finish[np.asarray(out.finished_ids, dtype=np.int64)] = end
            if concurrency is not None:  # each finish releases the next request at once
                for j in range(nxt, min(nxt + len(out.finished_ids), n)):
                    arrivals_s[j] = end
    window_end = float(arrivals_s[-1]) if n else 0.0
    if concurrency is not None:
        # closed loop: the window runs to the last response, as bench measures it
        measured = arrivals_s >= warmup_s
        window_end = float(np.nanmax(finish)) if n else 0.0
    sel = measured
    ttft = first[sel] - arrivals_s[sel]
    e2e = finish[sel] - arrivals_s[sel]
    outs = output_lens[sel]
    multi = outs >= 2
    tpot = (e2e[multi] - ttft[multi]) / (outs[multi] - 1)
    window = max(window_end - warmup_s, 1e-9)
    arrived = int(sel.sum())
    # Behind: over the measured window, the engine finished fewer than 95 % as many requests as arrived. A stable
    # engine keeps up (the two counts differ by edge effects of one latency); a saturated one's queue grows all run.
    in_window = (finish >= warmup_s) & (finish <= window_end)
    arrived_in_window = int(((arrivals_s >= warmup_s) & (arrivals_s <= window_end)).sum())
    behind = arrived_in_window > 0 and int(in_window.sum()) < SATURATED_SHARE * arrived_in_window
    return ArmMetrics(
        ttft_ms=_percentiles_ms(ttft),
        tpot_ms=_percentiles_ms(tpot),
        itl_ms=itl.summary(),
        e2e_ms=_percentiles_ms(e2e),
        throughput_tokens_per_s=round(tally.tokens_in_window / window, 3),
        request_rate=round(int(in_window.sum()) / window, 4),
        requests=arrived,
        unfinished=int(np.isnan(finish[sel]).sum()),
        saturated=behind,
        steps=tally.steps,
        mean_step_ms=round(tally.step_total / max(tally.steps, 1) * 1e3, 4),
        mean_batch=round(tally.batch_total / max(tally.steps, 1), 3),
        preemptions=tally.preemptions,
        kv_usage_max=round(tally.kv_max, 4),
        mean_accepted_length=round(1 + tally.accepted / tally.drafts, 4) if tally.drafts else None,
    )
