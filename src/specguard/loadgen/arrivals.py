"""Arrival schedules and prompt order. Pure, seeded, no I/O.

Open-loop shapes (constant, poisson, gamma, burst) fix every send time in
advance, so a slow server cannot slow the offered load. Closed-loop shapes
(idle, concurrency) release a request whenever a slot frees and have no
schedule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
from pydantic import ValidationError

from specguard.errors import OptionError
from specguard.results.models import LoadShape
from specguard.validation import describe

OPEN_LOOP = ("constant", "poisson", "gamma", "burst")

# The most requests a closed loop keeps in flight. Each is one connection of this one client process (a file
# descriptor and an ephemeral port: Linux's default range holds 28,232); far beyond this the client measures
# itself, and 100,000,000 (a typo) spent 90 s creating workers before the first request.
MAX_CONCURRENCY = 10_000


def arrival_times(
    kind: str,
    *,
    rate: float | None = None,
    burstiness: float = 1.0,
    num_requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
) -> Iterator[float]:
    """Send times in seconds after the start, first at 0, bounded by count and/or duration.

    gamma: inter-arrival gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)),
    mean 1/rate and coefficient of variation 1/sqrt(burstiness); burstiness 1 is Poisson,
    below 1 burstier, above 1 more regular (the convention of ``vllm bench serve``).
    """
    if kind not in OPEN_LOOP:
        raise ValueError(f"'{kind}' has no schedule (expected one of {', '.join(OPEN_LOOP)})")
    if num_requests is None and duration_s is None:
        raise ValueError("a schedule needs num_requests and/or duration_s")
    if kind == "burst":
        if num_requests is None:
            raise ValueError("a burst needs num_requests")
        yield from (0.0 for _ in range(num_requests))
        return
    if rate is None or rate <= 0:
        raise ValueError(f"{kind} arrivals need a rate > 0 (got {rate})")
    if kind == "gamma" and burstiness <= 0:
        raise ValueError(f"burstiness must be > 0 (got {burstiness})")
    rng = np.random.default_rng(seed)
    t = 0.0
    i = 0
    while (num_requests is None or i < num_requests) and (duration_s is None or t < duration_s):
        yield t
        i += 1
        if kind == "constant":
            t = i / rate
        elif kind == "poisson":
            t += float(rng.exponential(1.0 / rate))
        else:
            t += float(rng.gamma(burstiness, 1.0 / (rate * burstiness)))


def prompt_order(n_items: int, seed: int = 0) -> Iterator[int]:
    """Endless item order: each pass over the items is a fresh seeded permutation."""
    if n_items <= 0:
        raise ValueError("no prompts to draw from")
    rng = np.random.default_rng(seed + 1_000_003)
    while True:
        yield from (int(i) for i in rng.permutation(n_items))


def closed_loop_workers(load: LoadShape) -> int:
    """The workers a closed loop needs: its concurrency (idle: 1), never more than the requests it will send."""
    workers = 1 if load.kind == "idle" else (load.concurrency or 1)
    return min(workers, load.num_requests) if load.num_requests is not None else workers


def load_shape_from_options(
    *,
    rate: float | None = None,
    arrival: str = "poisson",
    burstiness: float = 1.0,
    concurrency: int | None = None,
    burst: int | None = None,
    num_requests: int | None = None,
    duration_s: float | None = None,
    warmup_requests: int = 0,
    seed: int = 0,
    names: Mapping[str, str] | None = None,
) -> LoadShape:
    """The load shape a bench command line asks for: exactly one of rate, concurrency or burst (none: idle).

    Raises OptionError naming the flags (or, with ``names``, the keys of a file: :data:`PLAN_KEYS`) when they
    do not make one shape or a value is out of bounds.
    """
    names = names or LOAD_OPTIONS
    drivers = [names[key] for key in ("rate", "concurrency", "burst")]
    given = [name for name, v in zip(drivers, (rate, concurrency, burst)) if v is not None]
    if len(given) > 1:
        raise OptionError(f"give only one of {', '.join(drivers)} (got {', '.join(given)})")
    if rate is not None:
        if arrival not in ("poisson", "constant", "gamma"):
            raise OptionError(f"{names['arrival']} must be poisson, constant or gamma (got {arrival})")
        kind = arrival
    else:
        kind = "concurrency" if concurrency is not None else "burst" if burst is not None else "idle"
    if kind == "burst" and num_requests is None:
        num_requests = burst
    if num_requests is None and duration_s is None:
        raise OptionError(f"give {names['num_requests']} and/or {names['duration_s']}")
    if concurrency is not None and concurrency > MAX_CONCURRENCY:
        raise OptionError(
            f"{names['concurrency']}: expected at most {MAX_CONCURRENCY:,} requests in flight (got {concurrency:,})"
        )
    try:
        return LoadShape(
            kind=kind,  # type: ignore[arg-type]  # a str checked above; LoadShape validates the Literal again
            rate=rate,
            burstiness=burstiness if kind == "gamma" else None,
            concurrency=concurrency,
            burst=burst,
            num_requests=num_requests,
            duration_s=duration_s,
            warmup_requests=warmup_requests,
            seed=seed,
        )
    except ValidationError as exc:
        raise OptionError("; ".join(describe(exc, names))) from exc


LOAD_OPTIONS = {
    "rate": "--rate",
    "arrival": "--arrival",
    "burstiness": "--burstiness",
    "concurrency": "--concurrency",
    "burst": "--burst",
    "num_requests": "--num-requests",
    "duration_s": "--duration",
    "warmup_requests": "--warmup",
    "seed": "--seed",
}

# The same, named as a check plan's traffic level (and its top-level warmup and seed) names them.
PLAN_KEYS = {
    "rate": "rate",
    "arrival": "arrival",
    "burstiness": "burstiness",
    "concurrency": "concurrency",
    "burst": "burst",
    "num_requests": "num_requests",
    "duration_s": "duration_s",
    "warmup_requests": "warmup",
    "seed": "seed",
}
