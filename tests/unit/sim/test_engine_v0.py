"""The V0 engine rules kept for V0-era comparisons: prefill-only steps without chunked prefill, batch expansion."""

from __future__ import annotations

import numpy as np
import pytest

from specguard.sim.engine import EngineConfig, KSchedule, SimEngine, Speculation
from specguard.sim.run import SimRequest, build_arms
from specguard.sim.step_time import DRAFT_PASS_OVERHEAD_S, V0_COSTS, ProposerCost, Roofline, StepLoad


class RecordingStep:
    """A step time of 10 ms that keeps every load it was asked about."""

    def __init__(self) -> None:
        self.loads: list[StepLoad] = []

    def __call__(self, load: StepLoad) -> float:
        self.loads.append(load)
        return 0.01


def _engine(**cfg: object) -> tuple[SimEngine, RecordingStep]:
    step = RecordingStep()
    return SimEngine(EngineConfig(num_kv_blocks=1000, **cfg), step, np.random.default_rng(0)), step  # type: ignore[arg-type]


def _decode_then_arrival(engine: SimEngine) -> None:
    engine.add(64, 20)
    engine.step()  # the first request's prefill
    engine.step()  # one decode
    engine.add(64, 20)  # a second prompt arrives while the first decodes


def test_v1_schedules_a_new_prompt_beside_the_running_decodes() -> None:
    engine, step = _engine()
    _decode_then_arrival(engine)
    engine.step()
    assert step.loads[-1].seqs == 2 and step.loads[-1].batched_tokens == 1 + 64


def test_v0_without_chunked_prefill_runs_the_prompt_alone_and_the_decode_waits() -> None:
    engine, step = _engine(chunked_prefill=False, prefill_first=True, max_num_batched_tokens=2048)
    _decode_then_arrival(engine)
    engine.step()
    assert step.loads[-1].seqs == 1 and step.loads[-1].batched_tokens == 64  # prefill only
    engine.step()
    assert step.loads[-1].seqs == 2 and step.loads[-1].batched_tokens == 2  # both decode


def _spec(k: int) -> Speculation:
    return Speculation("draft_model", KSchedule(k), [0.0] * k, k, ProposerCost("ngram"))


def test_batch_expansion_scores_each_draft_as_its_own_sequence_over_the_whole_context() -> None:
    k = 3
    loads = {}
    for expand in (False, True):
        engine, step = _engine(speculation=_spec(k), batch_expansion=expand)
        engine.add(100, 10)
        engine.step()  # prefill
        engine.step()  # first decode: 1 + k tokens at a context of 100 (acceptance 0: nothing accepted)
        loads[expand] = step.loads[-1]
    plain, expanded = loads[False], loads[True]
    assert plain.seqs == expanded.seqs == 1  # one request either way (mean batch counts requests)
    assert plain.scored_seqs == 1 and expanded.scored_seqs == 1 + k
    assert plain.batched_tokens == expanded.batched_tokens == 1 + k
    # every extra sequence reads the request's context and its own token again
    assert expanded.context_tokens - plain.context_tokens == k * (100 + 1)


def test_engine_v0_adds_the_published_cpu_costs_and_v0s_scheduler() -> None:
    common = dict(target="llama-3-70b", gpu="h100-80gb", tensor_parallel_size=4, rates=[1.0])
    spec = dict(method="draft_model", draft="qwen2.5-0.5b", num_speculative_tokens=4)
    v0 = SimRequest(**common, **spec, engine="v0")  # type: ignore[arg-type]
    v1 = SimRequest(**common, **spec)  # type: ignore[arg-type]
    arms0, arms1 = build_arms(v0), build_arms(v1)
    load = StepLoad(seqs=10, batched_tokens=10, context_tokens=5000)
    assert arms0.step(load) - arms1.step(load) == pytest.approx(10 * V0_COSTS.per_seq_s)
    base0, spec0 = arms0.engine_config(v0, False), arms0.engine_config(v0, True)
    assert not base0.chunked_prefill and base0.prefill_first and not base0.batch_expansion
    assert spec0.batch_expansion and base0.max_num_batched_tokens == 8192  # max(max_model_len 8192, 2048)
    assert spec0.speculation is not None and arms1.speculation is not None
    draft0, draft1 = spec0.speculation.proposer.draft_step, arms1.speculation.proposer.draft_step
    assert isinstance(draft0, Roofline) and isinstance(draft1, Roofline)
    assert draft0(load) - draft1(load) == pytest.approx(V0_COSTS.draft_pass_s - DRAFT_PASS_OVERHEAD_S)
