"""The traffic split, pure: which pool a request goes to, and which server of that pool serves it.

A sticky key is hashed into [0, 1) with SHA-256, not Python's ``hash()`` (salted per process), so a key maps
to the same point on every host and after every restart. The candidate owns the band [0, weight): raising the
weight only widens the band, so keys only ever move baseline -> candidate, and lowering it only moves them
back. A control pool owns the band [1 - weight, 1) at the top, so the candidate's and the control's bands grow
towards each other through the baseline's and never trade keys. Without a key, a uniform random number drawn
by the caller per request takes the hash's place (the caller owns the randomness; these functions own none).
"""

from __future__ import annotations

import hashlib

from specguard.canary.spec.vocabulary import PoolName

__all__ = ["LeastOutstanding", "RoundRobin", "choose_pool", "key_hash"]

# 53 bits: every value k / 2**53 is exact as a float and below 1.0 (64 bits would round the top values to 1.0).
_HASH_BITS = 53


def key_hash(key: str) -> float:
    """The key's point in [0, 1): the first 53 bits of SHA-256 of its UTF-8 bytes, over 2**53."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    scale: int = 2**_HASH_BITS  # annotated: mypy types a power with a variable exponent as Any
    return (int.from_bytes(digest[:8], "big") >> (64 - _HASH_BITS)) / scale


def _fraction(value: float, name: str) -> None:
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise ValueError(f"{name} must be in [0, 1] (got {value})")


def choose_pool(
    key_hash_or_none: float | None, candidate_weight: float, rng_value: float, control_weight: float = 0.0
) -> PoolName:
    """The pool of one request: ``candidate`` iff its point is below ``candidate_weight``.

    The point is the sticky key's hash, or ``rng_value`` (uniform in [0, 1), drawn per request) when the
    request has no key. Weights are fractions of traffic (a step's percent / 100). With a control pool, points
    at or above ``1 - control_weight`` go to it; the two weights may not sum past 1.
    """
    _fraction(candidate_weight, "candidate_weight")
    _fraction(control_weight, "control_weight")
    if candidate_weight + control_weight > 1.0:
        raise ValueError(f"candidate and control weights sum past 1 ({candidate_weight} + {control_weight})")
    point = rng_value if key_hash_or_none is None else key_hash_or_none
    if not 0.0 <= point < 1.0:
        raise ValueError(f"a key hash or random value is in [0, 1) (got {point})")
    if point < candidate_weight:
        return "candidate"
    if control_weight > 0.0 and point >= 1.0 - control_weight:
        return "control"
    return "baseline"


class RoundRobin:
    """Servers 0..n-1 in turn."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"a pool has at least one server (got {n})")
        self.n = n
        self._next = 0

    def choose(self) -> int:
        index = self._next
        self._next = (index + 1) % self.n
        return index


class LeastOutstanding:
    """The server with the fewest requests in flight; ties go round robin, so an idle pool still spreads.

    ``acquire`` picks a server and counts the request against it; ``release`` is called once when that
    request ends, however it ends (the caller's ``finally``).
    """

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"a pool has at least one server (got {n})")
        self.n = n
        self.outstanding = [0] * n
        self._start = 0  # where the search for the least loaded begins: the tie-break rotates

    def acquire(self) -> int:
        order = [(self._start + i) % self.n for i in range(self.n)]
        index = min(order, key=lambda i: self.outstanding[i])  # min keeps the first of equals
        self.outstanding[index] += 1
        self._start = (index + 1) % self.n
        return index

    def release(self, index: int) -> None:
        if self.outstanding[index] <= 0:
            raise ValueError(f"server {index} has no request in flight to release")
        self.outstanding[index] -= 1
