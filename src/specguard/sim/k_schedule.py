"""The best k per batch-size band, as vLLM's ``num_speculative_tokens_per_batch_size`` wants it. Pure.

At batch size b (requests in the step) and a typical context C, a request's
decode speed with k draft tokens is

  (1 + expected accepted tokens at k) / (target step(b requests, b (1 + k) tokens, b (C + 1 + k) context)
                                         + proposer(b, k))

with k = 0 meaning no speculation. The best k is taken at every b from 1 to
``max_num_seqs``; runs of batch sizes with the same best k become one band.
"""

from __future__ import annotations

from specguard.sim.acceptance import AcceptanceRates
from specguard.sim.results import KBand
from specguard.sim.step_time import ProposerCost, StepLoad, StepTime


def decode_speed(step_time: StepTime, proposer: ProposerCost, rates: AcceptanceRates, batch: int, k: int, context: int) -> float:
    """Predicted tokens per second of one request at this batch size and k."""
    tokens = batch * (1 + k)
    load = StepLoad(batch, tokens, batch * (context + 1 + k), float(batch * (context + 1 + k) * (1 + k)))
    seconds = step_time(load) + (proposer(batch, k, batch * (context + 1)) if k else 0.0)
    return (1 + (rates.mean_accepted(k) if k else 0.0)) / seconds


def best_k_bands(
    step_time: StepTime, proposer: ProposerCost, rates: AcceptanceRates, max_k: int, max_batch: int, context: int
) -> list[KBand]:
    bands: list[KBand] = []
    for b in range(1, max_batch + 1):
        speeds = [decode_speed(step_time, proposer, rates, b, k, context) for k in range(max_k + 1)]
        best = max(range(max_k + 1), key=lambda k: (speeds[k], -k))
        gain = speeds[best] / speeds[0]
        if bands and bands[-1].k == best:
            last = bands[-1]
            bands[-1] = last.model_copy(update={"end": b, "tokens_per_s_gain": round(min(last.tokens_per_s_gain, gain), 4)})
        else:
            bands.append(KBand(start=b, end=b, k=best, tokens_per_s_gain=round(gain, 4)))
    return bands
