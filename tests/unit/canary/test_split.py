"""The traffic split: a stable key hash, a monotone split, a binomially fair share, and the pool balancers."""

from __future__ import annotations

import hashlib
import math
import random

import pytest

from specguard.canary.proxy.split import LeastOutstanding, RoundRobin, choose_pool, key_hash


def test_key_hash_is_the_first_53_bits_of_sha256() -> None:
    digest = hashlib.sha256(b"user-42").digest()
    expected = (int.from_bytes(digest[:8], "big") >> 11) / 2**53
    assert key_hash("user-42") == expected


def test_key_hash_stays_below_one_even_for_the_largest_digest_prefix() -> None:
    # 2**64 - 1 over 2**64 would round to 1.0 as a float; the hash keeps 53 bits so it cannot.
    assert ((2**64 - 1) >> 11) / 2**53 < 1.0
    values = [key_hash(f"k{i}") for i in range(2000)]
    assert all(0.0 <= v < 1.0 for v in values)


def test_raising_the_weight_only_moves_keys_from_baseline_to_candidate() -> None:
    hashes = [key_hash(f"user-{i}") for i in range(3000)]
    weights = [0.0, 0.01, 0.05, 0.10, 0.25, 0.5, 0.75, 1.0]
    previous = ["baseline"] * len(hashes)
    for w in weights:
        now = [choose_pool(h, w, 0.5) for h in hashes]
        moved = {(a, b) for a, b in zip(previous, now, strict=True) if a != b}
        assert moved <= {("baseline", "candidate")}
        previous = now
    assert set(previous) == {"candidate"}
    # and lowering it only moves them back
    for w in reversed(weights):
        now = [choose_pool(h, w, 0.5) for h in hashes]
        assert {(a, b) for a, b in zip(previous, now, strict=True) if a != b} <= {("candidate", "baseline")}
        previous = now
    assert set(previous) == {"baseline"}


@pytest.mark.parametrize("weight", [0.05, 0.25, 0.5])
def test_the_split_of_400_keys_is_within_4_5_sigma_of_the_weight(weight: float) -> None:
    n = 400
    to_candidate = sum(choose_pool(key_hash(f"session-{i}"), weight, 0.0) == "candidate" for i in range(n))
    sigma = math.sqrt(n * weight * (1 - weight))
    assert abs(to_candidate - n * weight) <= 4.5 * sigma


def test_without_a_key_the_random_value_decides_per_request() -> None:
    assert choose_pool(None, 0.3, 0.29) == "candidate"
    assert choose_pool(None, 0.3, 0.30) == "baseline"
    rng = random.Random(7)
    n, weight = 400, 0.1
    to_candidate = sum(choose_pool(None, weight, rng.random()) == "candidate" for _ in range(n))
    assert abs(to_candidate - n * weight) <= 4.5 * math.sqrt(n * weight * (1 - weight))


def test_the_same_key_maps_the_same_way_every_time() -> None:
    h = key_hash("sticky")
    assert {choose_pool(h, 0.4, r) for r in (0.0, 0.5, 0.99)} == {choose_pool(h, 0.4, 0.0)}


def test_the_control_band_is_at_the_top_and_never_trades_keys_with_the_candidate() -> None:
    assert choose_pool(0.995, 0.01, 0.0, control_weight=0.01) == "control"
    assert choose_pool(0.005, 0.01, 0.0, control_weight=0.01) == "candidate"
    assert choose_pool(0.5, 0.01, 0.0, control_weight=0.01) == "baseline"
    hashes = [key_hash(f"u{i}") for i in range(2000)]
    previous = ["baseline"] * len(hashes)
    for w in (0.01, 0.05, 0.25, 0.5):
        now = [choose_pool(h, w, 0.0, control_weight=w) for h in hashes]
        moved = {(a, b) for a, b in zip(previous, now, strict=True) if a != b}
        assert moved <= {("baseline", "candidate"), ("baseline", "control")}
        previous = now


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.5, 1.5, 0.0), "candidate_weight"),
        ((0.5, -0.1, 0.0), "candidate_weight"),
        ((0.5, float("nan"), 0.0), "candidate_weight"),
        ((1.0, 0.5, 0.0), r"\[0, 1\)"),
        ((None, 0.5, 1.0), r"\[0, 1\)"),
        ((0.5, 0.6, 0.0, 0.5), "sum past 1"),
    ],
)
def test_out_of_range_inputs_are_refused(args: tuple[float | None, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        choose_pool(*args)  # type: ignore[arg-type]


def test_round_robin_takes_servers_in_turn() -> None:
    rr = RoundRobin(3)
    assert [rr.choose() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(ValueError):
        RoundRobin(0)


def test_least_outstanding_picks_the_least_loaded_and_rotates_ties() -> None:
    lo = LeastOutstanding(3)
    assert [lo.acquire() for _ in range(3)] == [0, 1, 2]  # ties rotate: an idle pool spreads
    lo.release(1)
    assert lo.acquire() == 1  # the only one with a free slot
    lo.release(0)
    lo.release(2)
    assert lo.outstanding == [0, 1, 0]
    assert lo.acquire() == 2  # tie between 0 and 2: the search starts after the last pick (1)
    assert lo.acquire() == 0
    with pytest.raises(ValueError, match="no request in flight"):
        LeastOutstanding(2).release(0)
