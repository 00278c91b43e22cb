"""Run directories as ``specguard bench`` writes them, from ``SimEngine`` driven by a known step time.

Requests arrive as a Poisson process; the engine steps while anything runs, and every token a step emits
reaches the client at the step's end: the chunk times a streaming client would record. ``merge`` folds that
share of chunks into the next one (vLLM's output loop falling behind); ``jitter_s`` adds the client's read
noise to each chunk time (kept increasing).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from specguard.results.models import LoadShape, MetricsSample, RequestRecord, RunInfo, SamplingOverrides
from specguard.results.run_dir import RunWriter
from specguard.results.store import JsonlAppender
from specguard.sim.engine import EngineConfig, KSchedule, SimEngine, Speculation
from specguard.sim.step_time import LinearProfile, ProposerCost

# About an 8B model on one H100: 8 ms of weights per step, 128 KiB of KV per token, 20 us per batched token.
TRUE = LinearProfile(fixed_s=0.008, per_kv_token_s=5e-8, per_batched_token_s=2e-5)


def write_run(
    out: Path,
    *,
    k: int = 0,
    requests: int = 120,
    rate: float = 20.0,
    profile: LinearProfile = TRUE,
    merge: float = 0.0,
    jitter_s: float = 0.0,
    seed: int = 0,
    fail_all: bool = False,
    output_range: tuple[int, int] = (20, 120),
    per_position_counters: bool = False,
) -> Path:
    rng = np.random.default_rng(seed)
    rates = [0.7, 0.5, 0.35, 0.25, 0.15][:k]
    spec = Speculation("ngram", KSchedule(k), rates, 0, ProposerCost("none")) if k else None
    engine = SimEngine(EngineConfig(num_kv_blocks=20000, speculation=spec), profile, rng)
    arrivals = np.cumsum(rng.exponential(1 / rate, requests))
    prompts = rng.integers(50, 1000, requests)
    outputs = rng.integers(*output_range, requests)
    chunks: dict[int, list[tuple[float, int]]] = {i: [] for i in range(requests)}
    now, nxt, drafts, draft_tokens, accepted = 0.0, 0, 0, 0, 0
    while nxt < requests or not engine.idle:
        if engine.idle:
            now = engine.clock = max(now, float(arrivals[nxt]))
        while nxt < requests and arrivals[nxt] <= now:
            engine.add(int(prompts[nxt]), int(outputs[nxt]))
            nxt += 1
        step = engine.step()
        assert step is not None
        now += step.duration_s
        drafts, draft_tokens, accepted = drafts + step.drafts, draft_tokens + step.draft_tokens, accepted + step.accepted_tokens
        for rid in step.first_ids:
            chunks[rid].append((now, 1))
        for rid, n in zip(step.emit_ids.tolist(), step.emit_tokens.tolist(), strict=True):
            chunks[rid].append((now, n))
    writer = RunWriter(out)
    writer.write_run(
        RunInfo(
            tool_version="0",
            base_url="http://127.0.0.1:9",
            api="completions",
            model="org/target",
            metrics_url="http://127.0.0.1:9/metrics",
            prompt_source="synthetic:random",
            prompt_count=requests,
            load=LoadShape(kind="poisson", rate=rate, num_requests=requests),
            sampling=SamplingOverrides(),
            server_version="0.32.0",
            started_unix=time.time(),
            started_monotonic=0.0,
        )
    )
    records = []
    for i in range(requests):
        got = chunks[i]
        if merge:
            kept: list[tuple[float, int]] = []
            carry = 0
            for j, (t, n) in enumerate(got):
                if j < len(got) - 1 and j > 0 and rng.random() < merge:
                    carry += n
                    continue
                kept.append((t, n + carry))
                carry = 0
            got = kept
        sent = float(arrivals[i])
        times = [t - sent for t, _ in got]
        if jitter_s:
            times = list(np.maximum.accumulate(np.asarray(times) + rng.normal(0, jitter_s, len(times)).clip(0)))
        ok = not fail_all
        records.append(
            RequestRecord(
                index=i,
                seq=i,
                request_id=f"r{i}",
                segment="default",
                ok=ok,
                error=None if ok else "http 500",
                http_status=200 if ok else 500,
                scheduled_s=sent,
                sent_s=sent,
                send_lag_s=0.0,
                ttft_s=times[0] if ok else None,
                e2e_s=times[-1] if ok else None,
                stream_end_s=times[-1] if ok else None,
                chunk_times_s=times if ok else [],
                chunk_tokens=[n for _, n in got] if ok else [],
                token_source="server_usage" if ok else None,
                prompt_tokens=int(prompts[i]),
                output_tokens=int(outputs[i]) if ok else None,
                finish_reason="length" if ok else None,
            )
        )
    JsonlAppender(writer.requests_path).append_many(records)
    names = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")
    # with per_position_counters: vllm:spec_decode_num_accepted_tokens_per_pos at the expected counts of the rates drawn
    after_pos = [float(round(drafts * a)) for a in rates] if per_position_counters else []
    for phase, t, values, pos in (
        ("before", 0.0, (0, 0, 0), [0.0] * len(after_pos)),
        ("after", now, (drafts, draft_tokens, accepted), after_pos),
    ):
        counters = {n: float(v) for n, v in zip(names, values, strict=True)} if k else {}
        writer.metrics.append(MetricsSample(t_s=t, phase=phase, ok=True, counters=counters, accepted_per_position=pos))
    writer.close()
    return out
