import numpy as np
import pytest

from specguard.errors import OptionError
from specguard.loadgen.arrivals import (
    MAX_CONCURRENCY,
    arrival_times,
    closed_loop_workers,
    load_shape_from_options,
    prompt_order,
)


def gaps(kind, n=20000, **kw):
    t = np.array(list(arrival_times(kind, num_requests=n, seed=3, **kw)))
    return t, np.diff(t)


def test_constant_rate_is_exact():
    t, g = gaps("constant", n=100, rate=4.0)
    assert t[0] == 0.0
    assert np.allclose(g, 0.25)


def test_poisson_rate_and_dispersion():
    _, g = gaps("poisson", rate=5.0)
    assert g.mean() == pytest.approx(0.2, rel=0.03)
    # exponential gaps: coefficient of variation 1
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_rate_and_dispersion(burstiness):
    _, g = gaps("gamma", rate=2.0, burstiness=burstiness)
    assert g.mean() == pytest.approx(0.5, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.07)


def test_burst_releases_all_at_zero():
    assert list(arrival_times("burst", num_requests=5)) == [0.0] * 5


def test_seed_makes_schedule_reproducible_and_distinct():
    a = list(arrival_times("poisson", rate=3, num_requests=50, seed=1))
    b = list(arrival_times("poisson", rate=3, num_requests=50, seed=1))
    c = list(arrival_times("poisson", rate=3, num_requests=50, seed=2))
    assert a == b
    assert a != c


def test_duration_bound():
    t = list(arrival_times("constant", rate=10, duration_s=2.0))
    assert len(t) == 20
    assert max(t) < 2.0


def test_count_and_duration_both_bound():
    assert len(list(arrival_times("constant", rate=10, duration_s=100, num_requests=7))) == 7


@pytest.mark.parametrize(
    "kind,kw",
    [
        ("poisson", {"rate": 0, "num_requests": 3}),
        ("gamma", {"rate": 1, "burstiness": 0, "num_requests": 3}),
        ("poisson", {"rate": 1}),
        ("idle", {"num_requests": 3}),
        ("burst", {"duration_s": 3}),
    ],
)
def test_bad_schedules_raise(kind, kw):
    with pytest.raises(ValueError):
        list(arrival_times(kind, **kw))


def test_prompt_order_is_seeded_permutation_passes():
    order = prompt_order(5, seed=9)
    first = [next(order) for _ in range(10)]
    assert sorted(first[:5]) == list(range(5)) and sorted(first[5:]) == list(range(5))
    again = prompt_order(5, seed=9)
    assert [next(again) for _ in range(10)] == first


def test_load_shape_from_options_rules():
    assert load_shape_from_options(num_requests=3).kind == "idle"
    g = load_shape_from_options(rate=2.0, arrival="gamma", burstiness=0.5, num_requests=3)
    assert (g.kind, g.burstiness) == ("gamma", 0.5)
    assert load_shape_from_options(rate=2.0, burstiness=0.5, num_requests=3).burstiness is None  # poisson
    assert load_shape_from_options(concurrency=4, duration_s=5).kind == "concurrency"
    b = load_shape_from_options(burst=8)
    assert (b.kind, b.num_requests) == ("burst", 8)
    with pytest.raises(ValueError, match="only one"):
        load_shape_from_options(rate=1.0, concurrency=2, num_requests=1)
    with pytest.raises(ValueError, match="--arrival"):
        load_shape_from_options(rate=1.0, arrival="uniform", num_requests=1)
    with pytest.raises(ValueError, match="--num-requests"):
        load_shape_from_options(rate=1.0)


def test_a_closed_loop_never_starts_more_workers_than_it_has_requests():
    """--concurrency 5000 --num-requests 2 starts 2 workers; with a duration alone the concurrency is kept."""
    assert closed_loop_workers(load_shape_from_options(concurrency=5000, num_requests=2)) == 2
    assert closed_loop_workers(load_shape_from_options(concurrency=3, num_requests=10)) == 3
    assert closed_loop_workers(load_shape_from_options(concurrency=5000, duration_s=1.0)) == 5000
    assert closed_loop_workers(load_shape_from_options(num_requests=4)) == 1  # idle: one at a time
    with pytest.raises(OptionError, match=f"--concurrency: expected at most {MAX_CONCURRENCY:,}"):
        load_shape_from_options(concurrency=MAX_CONCURRENCY + 1, num_requests=2)
