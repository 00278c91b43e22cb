"""The engine model: acceptance sampling, KV accounting against the sizing formulas, preemption, both step paths."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specguard.sim.acceptance import AcceptanceRates, AcceptedSampler
from specguard.sim.engine import EngineConfig, KSchedule, SimEngine, SimulationError, Speculation
from specguard.sim.simulate import simulate_arm
from specguard.sim.step_time import LinearProfile, ProposerCost
from specguard.sim.workload import Arrivals, arrival_times
from specguard.sizing.catalog import GPUS, MODELS
from specguard.sizing.kv import kv_bytes_per_token
from specguard.sizing.memory_plan import MemoryInputs, model_weight_bytes, plan_memory

STEP = LinearProfile(fixed_s=0.01, per_kv_token_s=1e-7, per_batched_token_s=2e-5)
RATES = [0.8, 0.6, 0.4, 0.2]


def _spec(k: int = 4, lookahead: int = 0) -> Speculation:
    return Speculation("ngram", KSchedule(k), RATES[:k], lookahead, ProposerCost("ngram"))


@pytest.mark.parametrize("rates", [[0.8, 0.6, 0.4, 0.2], [0.95, 0.9, 0.85], [0.3], [0.5, 0.0]])
def test_mean_accepted_length_matches_the_per_position_rates(rates: list[float]) -> None:
    draws = AcceptedSampler(rates, np.random.default_rng(1)).draw(200_000)
    expected = 1 + sum(rates)
    se = float(np.std(draws)) / math.sqrt(len(draws))
    assert abs(1 + draws.mean() - expected) < 4 * se + 1e-12
    for i, a in enumerate(rates, start=1):  # and each P(n >= i) is its rate
        assert float((draws >= i).mean()) == pytest.approx(a, abs=0.005)


def test_rates_that_increase_are_refused() -> None:
    with pytest.raises(ValueError, match="must not increase"):
        AcceptanceRates(per_position=[0.5, 0.7])


def test_the_engine_reports_vllms_mean_acceptance_length() -> None:
    arrivals = arrival_times(Arrivals(), 2.0, 200.0, np.random.default_rng(0))
    n = len(arrivals)
    m = simulate_arm(
        EngineConfig(num_kv_blocks=100_000, speculation=_spec()),
        STEP,
        arrivals,
        np.full(n, 100),
        np.full(n, 400),
        warmup_s=0.0,
    )
    assert m.mean_accepted_length == pytest.approx(1 + sum(RATES), abs=0.02)


def test_kv_blocks_follow_the_sizing_formulas() -> None:
    target = MODELS["llama-3-8b"]
    plan = plan_memory(
        MemoryInputs(
            target_shape=target.shape,
            target_weight_bytes=model_weight_bytes(target, "bfloat16"),
            gpu_memory_bytes=GPUS["h100-80gb"].memory_bytes,
            max_model_len=8192,
        ),
        None,
    )
    per_block = kv_bytes_per_token(target.shape, 2) * 16
    assert plan.baseline.kv_blocks == int(plan.baseline.kv_budget_bytes_per_gpu) // per_block
    engine = SimEngine(EngineConfig(num_kv_blocks=plan.baseline.kv_blocks), STEP, np.random.default_rng(0))
    for _ in range(3):
        engine.add(1000, 50)
    engine.step()  # three prefills of 1000 tokens: ceil(1000 / 16) = 63 blocks each
    assert plan.baseline.kv_blocks - engine.free_blocks == 3 * 63
    for _ in range(30):  # 1000 + 31 tokens of context: 65 blocks each once synced
        engine.step()
    engine._sync_blocks(0)
    assert plan.baseline.kv_blocks - engine.free_blocks == 3 * math.ceil(1031 / 16)
    while not engine.idle:
        engine.step()
    assert engine.free_blocks == plan.baseline.kv_blocks


def test_lookahead_slots_are_reserved_for_draft_methods() -> None:
    engine = SimEngine(EngineConfig(num_kv_blocks=10_000, speculation=_spec(4, lookahead=4)), STEP, np.random.default_rng(0))
    engine.add(32, 100)
    engine.step()  # prefill: 2 blocks
    engine.fast_path = False
    engine.step()  # a decode: 32 + 1 + 4 draft tokens + 4 lookahead = 41 tokens -> 3 blocks
    ctx = int(engine.ctx[0])
    assert int(engine.blocks[0]) == 3 and ctx <= 37


def test_running_out_of_blocks_preempts_the_last_admitted_and_recomputes_it() -> None:
    # 20 blocks of 16 tokens: two requests of 100 + 80 tokens (12 blocks each at the end) cannot both finish in place
    engine = SimEngine(EngineConfig(num_kv_blocks=20), STEP, np.random.default_rng(0))
    a, b = engine.add(100, 80), engine.add(100, 80)
    finished: list[int] = []
    preempted = 0
    while not engine.idle:
        out = engine.step()
        assert out is not None
        finished += out.finished_ids
        preempted += out.preempted
        assert engine.free_blocks >= 0
    assert preempted >= 1 and sorted(finished) == [a, b]
    assert finished[0] == a  # the first admitted is never the one preempted
    assert engine.free_blocks == 20


def test_a_request_larger_than_the_pool_is_an_error_not_a_hang() -> None:
    engine = SimEngine(EngineConfig(num_kv_blocks=4), STEP, np.random.default_rng(0))
    engine.add(1000, 10)
    with pytest.raises(SimulationError, match="cannot be scheduled"):
        engine.step()


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.slow  # 6.7 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_the_fast_path_gives_exactly_what_the_full_scheduler_gives(speculative: bool) -> None:
    arrivals = arrival_times(Arrivals(), 3.0, 120.0, np.random.default_rng(4))
    rng = np.random.default_rng(5)
    n = len(arrivals)
    prompts, outputs = rng.integers(20, 900, n), rng.integers(1, 300, n)
    cfg = EngineConfig(num_kv_blocks=3000, max_num_seqs=32, speculation=_spec() if speculative else None)
    fast = simulate_arm(cfg, STEP, arrivals, prompts, outputs, 10.0, seed=3)
    full = simulate_arm(cfg, STEP, arrivals, prompts, outputs, 10.0, seed=3, fast_path=False)
    # the fast path brings block counts up to date lazily, so its KV peak may differ by the blocks of one step's
    # new tokens per request (here 32 requests x up to 2 blocks of 3000); everything else is identical
    f, g = fast.model_dump(), full.model_dump()
    assert abs(f.pop("kv_usage_max") - g.pop("kv_usage_max")) <= 32 * 2 / 3000
    assert f == g
    assert fast.steps > 100


@pytest.mark.slow  # 5.2 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_at_low_load_throughput_is_the_offered_load() -> None:
    arrivals = arrival_times(Arrivals(kind="constant"), 1.0, 600.0, np.random.default_rng(0))
    n = len(arrivals)
    m = simulate_arm(EngineConfig(num_kv_blocks=50_000), STEP, arrivals, np.full(n, 200), np.full(n, 100), 60.0)
    assert m.throughput_tokens_per_s == pytest.approx(100.0, rel=0.02)
    assert not m.saturated and m.unfinished == 0
    # alone on the engine, each decode step is fixed + per KV token x context + per batched token x 1
    first_decode = 0.01 + 1e-7 * 201 + 2e-5
    assert m.itl_ms.p50 == pytest.approx(first_decode * 1e3, rel=0.01)


@pytest.mark.slow  # 5.2 s when measured under load: `make test` runs it, `make test-fast` leaves it out
def test_past_capacity_the_queue_grows_and_the_arm_says_it_is_saturated() -> None:
    arrivals = arrival_times(Arrivals(), 50.0, 120.0, np.random.default_rng(0))
    n = len(arrivals)
    m = simulate_arm(EngineConfig(num_kv_blocks=50_000, max_num_seqs=16), STEP, arrivals, np.full(n, 200), np.full(n, 200), 10.0)
    assert m.saturated
    assert m.request_rate < 40


def test_k_schedule_picks_the_band_for_the_batch() -> None:
    sched = KSchedule(4, ((1, 8, 4), (9, 32, 2), (33, 256, 0)))
    assert [sched.at(b) for b in (1, 8, 9, 32, 33, 300)] == [4, 4, 2, 2, 0, 4]
