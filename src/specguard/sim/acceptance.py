"""Per-position acceptance rates, as vLLM counts them, and drawing accepted lengths from them. Pure.

vLLM's ``vllm:spec_decode_num_accepted_tokens_per_pos[i]`` over
``num_drafts`` is the share of drafts whose first i + 1 tokens were all
accepted (``acceptance.per_position`` in the definitions): a non-increasing
list a_1 >= a_2 >= ... >= a_k. A step's accepted count n is then drawn with
P(n >= i) = a_i, so the mean accepted length is 1 + sum(a_i), vLLM's
``acceptance.mean_length``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field, field_validator

SAMPLE_BUFFER = 1 << 16  # accepted counts drawn at once; the engine slices them per step


class AcceptanceRates(BaseModel):
    per_position: list[float] = Field(min_length=1, description="a_i: share of drafts with their first i tokens accepted")
    source: str = "given"

    @field_validator("per_position")
    @classmethod
    def _non_increasing(cls, rates: list[float]) -> list[float]:
        if any(not 0.0 <= r <= 1.0 for r in rates):
            raise ValueError("each rate must lie in [0, 1]")
        if any(b > a + 1e-9 for a, b in zip(rates, rates[1:], strict=False)):
            raise ValueError(
                "per-position rates must not increase (a draft's position i+1 is accepted only with position i): "
                + ",".join(f"{r:g}" for r in rates)
            )
        return rates

    @property
    def k(self) -> int:
        return len(self.per_position)

    def truncated(self, k: int) -> list[float]:
        """The rates of the first k positions; past the known ones, the last one's conditional rate carries on."""
        rates = list(self.per_position[:k])
        last = self.per_position[-1]
        ratio = last / self.per_position[-2] if len(self.per_position) > 1 and self.per_position[-2] > 0 else last
        while len(rates) < k:
            rates.append(rates[-1] * ratio if rates else last)
        return rates

    def mean_accepted(self, k: int) -> float:
        """Expected accepted draft tokens per draft at k (without the bonus token)."""
        return float(sum(self.truncated(k)))


def accepted_sampler(rates: list[float], rng: np.random.Generator) -> AcceptedSampler:
    return AcceptedSampler(rates, rng)


class AcceptedSampler:
    """Draws accepted counts in [0, k] with P(n >= i) = rates[i - 1], from a buffer refilled as it runs out."""

    def __init__(self, rates: list[float], rng: np.random.Generator) -> None:
        self.neg_rates = -np.asarray(rates, dtype=np.float64)
        self.rng = rng
        self.buffer: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self.pos = 0

    def _refill(self, at_least: int) -> None:
        u = self.rng.random(max(SAMPLE_BUFFER, at_least))
        # count of i with u < a_i: a_i are non-increasing, so -a_i rise and searchsorted counts them
        self.buffer = np.searchsorted(self.neg_rates, -u, side="left").astype(np.int64)
        self.pos = 0

    def draw(self, n: int) -> NDArray[np.int64]:
        if self.pos + n > len(self.buffer):
            self._refill(n)
        out = self.buffer[self.pos : self.pos + n]
        self.pos += n
        return out


def parse_acceptance(text: str | None, option: str = "--acceptance") -> list[float] | None:
    """``0.8,0.6,0.4`` -> per-position rates, held to ``AcceptanceRates``'s rules ([0, 1], non-increasing).

    The one parser of ``sim run`` and ``sim serve``: a bad value is an ``OptionError`` naming ``option``.
    """
    from specguard.errors import OptionError
    from specguard.validation import options

    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError as exc:
        raise OptionError(f"{option} {text!r}: expected comma-separated numbers in [0, 1], such as 0.8,0.6,0.4") from exc
    return options(AcceptanceRates, {"per_position": values}, {"per_position": option}).per_position
