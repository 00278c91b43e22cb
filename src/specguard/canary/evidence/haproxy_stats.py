"""HAProxy's own counters per server (``show stat``): what the pools' in-flight streams and 5xx answers are.

Behind HAProxy, specguard sees no request itself. What it needs of the engine besides the weights comes from
HAProxy's statistics on the same runtime socket: ``scur`` (the server's current sessions: streams in flight,
for draining a rollback) and the HTTP response counters ``hrsp_1xx`` ... ``hrsp_5xx``, ``hrsp_other`` (the
pool's error rate and 5xx bursts, "the engine's 5xx" the checklist asks to alert on). The CSV's first line
names its columns (``# pxname,svname,...``); columns are found by name, because they were added over HAProxy
releases (2.6 has 90-odd), never removed or reordered, and a reader by position breaks on the next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.vocabulary import PoolName

__all__ = ["ServerStat", "parse_show_stat", "pool_in_flight", "pool_responses"]

_RESPONSE_CLASSES = ("hrsp_1xx", "hrsp_2xx", "hrsp_3xx", "hrsp_4xx", "hrsp_5xx", "hrsp_other")


@dataclass(frozen=True)
class ServerStat:
    """One server line of ``show stat``: its sessions now and its HTTP responses since HAProxy started."""

    backend: str
    name: str
    sessions_now: int
    sessions_total: int
    responses_5xx: int
    responses_total: int


def _int(value: str) -> int:
    return int(value) if value.strip() else 0


def parse_show_stat(text: str, backend: str) -> dict[str, ServerStat]:
    """The server lines of one backend, by server name; ValueError if the text is not ``show stat`` CSV."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise ValueError("no '# pxname,svname,...' header")
    header = lines[0][2:].split(",")
    col = {name: i for i, name in enumerate(header)}
    missing = [c for c in ("pxname", "svname", "scur", "stot", *_RESPONSE_CLASSES) if c not in col]
    if missing:
        raise ValueError(f"no column {', '.join(missing)}")
    out: dict[str, ServerStat] = {}
    for line in lines[1:]:
        values = line.split(",")
        if len(values) < len(header) - 1:
            raise ValueError(f"short line: {line[:80]!r}")
        name = values[col["svname"]]
        if values[col["pxname"]] != backend or name in ("FRONTEND", "BACKEND"):
            continue
        out[name] = ServerStat(
            backend=backend,
            name=name,
            sessions_now=_int(values[col["scur"]]),
            sessions_total=_int(values[col["stot"]]),
            responses_5xx=_int(values[col["hrsp_5xx"]]),
            responses_total=sum(_int(values[col[c]]) for c in _RESPONSE_CLASSES),
        )
    return out


def pool_in_flight(engine: HAProxyEngine, stats: Mapping[str, ServerStat]) -> dict[PoolName, int]:
    """Sessions open on each pool's servers now: the streams a rollback waits for."""
    return {pool: sum(stats[s].sessions_now for s in names if s in stats) for pool, names in engine.pool_servers().items()}


def pool_responses(
    engine: HAProxyEngine, before: Mapping[str, ServerStat], after: Mapping[str, ServerStat]
) -> dict[PoolName, tuple[int, int]]:
    """(5xx, all) HTTP responses per pool between two reads; a server whose counters fell (HAProxy reloaded)
    counts from zero, as Prometheus' ``increase`` does."""
    out: dict[PoolName, tuple[int, int]] = {}
    for pool, names in engine.pool_servers().items():
        errors = total = 0
        for s in names:
            if s not in after:
                continue
            a, b = after[s], before.get(s)
            fell = b is None or a.responses_total < b.responses_total or a.responses_5xx < b.responses_5xx
            errors += a.responses_5xx - (0 if fell or b is None else b.responses_5xx)
            total += a.responses_total - (0 if fell or b is None else b.responses_total)
        out[pool] = (errors, total)
    return out
