"""Predict a ``specguard bench`` run the simulator was not fitted to, and score the prediction. Pure but for reading.

The run's own traffic (``from_run``) goes through a simulated engine with the given step time and, for a
speculative run, the method's proposer, k and the run's own acceptance; each metric's predicted p50 and p90
are set beside the measured ones. The simulated clock starts at each request's arrival at the engine, the
client's at its send: on loopback the difference is the API server's own time, which the step time absorbs
where it was calibrated on the same server.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from specguard.results.models import Percentiles as MeasuredPercentiles
from specguard.sim.engine import EngineConfig, KSchedule, Speculation
from specguard.sim.from_run import RunWorkload
from specguard.sim.results import ArmMetrics
from specguard.sim.results import Percentiles as SimPercentiles
from specguard.sim.simulate import simulate_arm
from specguard.sim.step_time import ProposerCost, StepTime

PREDICTED_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


class PredictionPoint(BaseModel):
    metric: str
    stat: str
    measured: float | None
    predicted: float | None
    error: float | None = Field(description="(predicted - measured) / measured")


class RunPrediction(BaseModel):
    run: str
    points: list[PredictionPoint]
    predicted: ArmMetrics


def _point(metric: str, stat: str, measured: float | None, predicted: float | None) -> PredictionPoint:
    err = (predicted - measured) / measured if measured and predicted is not None else None
    return PredictionPoint(
        metric=metric, stat=stat, measured=measured, predicted=predicted, error=None if err is None else round(err, 4)
    )


def predict_run(
    work: RunWorkload,
    step_time: StepTime,
    *,
    method: str | None = None,
    k: int = 0,
    proposer: ProposerCost | None = None,
    lookahead: int = 0,
    num_kv_blocks: int | None = None,
    block_size: int = 16,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 2048,
    seed: int = 0,
) -> RunPrediction:
    """The run replayed through the engine model; ``method``/``k`` make the speculative arm (acceptance: the run's)."""
    spec = None
    if method is not None and k:
        rates = (work.acceptance or [0.0])[:k]
        rates += [0.0] * (k - len(rates))
        spec = Speculation(
            method,
            KSchedule(k),
            rates,
            lookahead,
            proposer or ProposerCost("ngram"),
            draft_fraction=work.draft_fraction or 1.0,
        )
    config = EngineConfig(
        num_kv_blocks=num_kv_blocks or work.num_blocks or 1_000_000,
        block_size=work.block_size or block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        speculation=spec,
    )
    predicted = simulate_arm(
        config, step_time, work.arrivals_s, work.prompts, work.outputs, 0.0, seed=seed, concurrency=work.concurrency
    )
    points = []
    for m in PREDICTED_METRICS:
        meas: MeasuredPercentiles = getattr(work.measured, m)
        pred: SimPercentiles = getattr(predicted, m)
        points.append(_point(m, "p50", meas.p50, pred.p50))
        points.append(_point(m, "p90", meas.p90, pred.p90))
    points.append(_point("output_tokens_per_s", "mean", work.measured.output_tokens_per_s, predicted.throughput_tokens_per_s))
    return RunPrediction(run=str(work.path), points=points, predicted=predicted)
