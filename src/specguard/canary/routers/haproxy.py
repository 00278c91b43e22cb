"""The HAProxy engine: the canary's weights as HAProxy server weights, set through its runtime API.

On a fleet HAProxy already sits in front of the pools; the baseline's and the speculative servers are members
of one backend, and the canary moves traffic by changing their weights with ``set server BACKEND/SERVER weight
N`` on the stats socket (``level admin``), then reads them back with ``show servers state BACKEND``. HAProxy
sends a new request to a server with the probability weight / sum of the backend's weights (``roundrobin``
exactly so; ``hash-type consistent`` on the ring's share, which the weight sets). A weight changes only
which server *new* requests go to: streams in flight finish where they are.

How a fraction maps (``server_weights``): a pool's servers together carry ``POOL_WEIGHT_TOTAL`` = 200 at the
whole traffic, so each server of a pool with share ``f`` and ``n`` servers gets ``floor(f * 200 / n + 0.5)``,
at least 1 when ``f > 0`` (a step of a share must send it something), 0 when ``f == 0``. The baseline's
share is ``1 - candidate - control``. The realised share of a pool is its servers' weights over all the
weights (``realised_shares``). 200, not HAProxy's maximum of 256: with one or two servers per pool every
default step (1, 5, 10, 25, 50, 100 %) is then carried exactly (1 % is 2 of 200: 2 against 198), where 256
would be off by +0.17, +0.08, +0.16, 0, 0 and 0 points (3, 13 and 26 of 256 for 1, 5 and 10 %). With three
baseline servers and one candidate the defaults are off by 0, +0.03, 0, 0, +0.25 and 0 points (5 % is 10 of
199, 50 % is 100 of 199: 33 per baseline server). Other shares are carried to half a weight per server: the
realised share is within 0.25 points times the larger pool's server count (on a 0.01 % grid: at most 0.25
points with one server per pool, 0.49 with two baseline servers, 0.74 with three), except that a pool whose
share is below half a weight per server still gets weight 1 per server (0.5 % for one server): a share the
canary asks for is never silently 0.

The weights move monotonically with the share (a pool's weight never falls while its share rises), so with
consistent hashing a sticky key only ever moves from the baseline to the candidate as the weight rises (HAProxy
adds or removes a server's ring points as its weight changes), as specguard's own split does.

A rollback (candidate 0) sets the speculative servers' weight to 0 first, before anything else, and with
``drain: true`` also ``set server B/S state drain``; a later positive share takes them out of drain again.
Every call is read back: a weight or a drain state that did not take is a ``RuntimeFailure``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from specguard.canary.evidence.haproxy_stats import ServerStat, parse_show_stat, pool_in_flight
from specguard.canary.routers.base import EngineRouter
from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.vocabulary import PoolName
from specguard.errors import RuntimeFailure

__all__ = [
    "ADMIN_DRAIN_FLAGS",
    "HAPROXY_MAX_WEIGHT",
    "POOL_WEIGHT_TOTAL",
    "AppliedWeights",
    "HAProxyRouter",
    "HAProxyRuntime",
    "ServerState",
    "haproxy_weights",
    "parse_servers_state",
    "realised_shares",
    "server_weight",
]

HAPROXY_MAX_WEIGHT: Final = 256  # "Absolute weight can only be between 0 and 256 inclusive." (HAProxy 2.6)
POOL_WEIGHT_TOTAL: Final = 200
# srv_admin_state bits (HAProxy's SRV_ADMF_*): FDRAIN is what 'set server state drain' sets, IDRAIN inherited.
ADMIN_DRAIN_FLAGS: Final = 0x08 | 0x10
_SRV_RUNNING: Final = 2  # srv_op_state SRV_ST_RUNNING: up, health checks passing
_STATE_FORMAT: Final = "1"  # the first line of 'show servers state': the format version this parser reads


def server_weight(fraction: float, servers: int) -> int:
    """The HAProxy weight of each of a pool's ``servers`` when the pool has ``fraction`` of the traffic."""
    if not math.isfinite(fraction) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"a share of the traffic is in [0, 1] (got {fraction!r})")
    if servers < 1:
        raise ValueError(f"a pool has at least one server (got {servers})")
    if fraction == 0.0:
        return 0
    return max(1, math.floor(fraction * POOL_WEIGHT_TOTAL / servers + 0.5))


def haproxy_weights(engine: HAProxyEngine, candidate: float, control: float = 0.0) -> dict[str, int]:
    """Each server's weight (in the order baseline, candidate, control servers) for these shares of new requests."""
    for name, value in (("candidate", candidate), ("control", control)):
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"the {name} share is a fraction of the traffic in [0, 1] (got {value!r})")
    if control > 0 and not engine.control_servers:
        raise ValueError("a control share without control servers")
    baseline = 1.0 - candidate - control
    if baseline < -1e-9:
        raise ValueError(f"candidate and control shares sum past the whole traffic ({candidate} + {control})")
    shares: dict[PoolName, float] = {"baseline": max(0.0, baseline), "candidate": candidate, "control": control}
    return {s: server_weight(shares[pool], len(names)) for pool, names in engine.pool_servers().items() for s in names}


def realised_shares(engine: HAProxyEngine, weights: Mapping[str, int]) -> dict[PoolName, float]:
    """Each pool's share of new requests under ``weights``: its servers' weights over all of them."""
    total = sum(weights[s] for names in engine.pool_servers().values() for s in names)
    if total == 0:
        raise ValueError("every weight is 0: HAProxy would answer 503 to every request")
    return {pool: sum(weights[s] for s in names) / total for pool, names in engine.pool_servers().items()}


@dataclass(frozen=True)
class ServerState:
    """One server's line of ``show servers state`` (the fields the engine uses)."""

    backend: str
    name: str
    address: str
    port: int
    op_state: int
    admin_state: int
    weight: int  # srv_uweight: the weight 'set server ... weight' sets (kept while drained)
    initial_weight: int  # srv_iweight: the configuration's

    @property
    def up(self) -> bool:
        return self.op_state == _SRV_RUNNING

    @property
    def draining(self) -> bool:
        return bool(self.admin_state & ADMIN_DRAIN_FLAGS)


def parse_servers_state(text: str) -> list[ServerState]:
    """The servers of ``show servers state [BACKEND]``'s answer; ValueError if it is not that (an error message).

    Format 1: a version line ``1``, a ``# name name ...`` header, one line of space-separated values per server.
    Fields are found by the header's names, not by position, so columns HAProxy appends later do not matter.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or lines[0].strip() != _STATE_FORMAT or not lines[1].startswith("#"):
        raise ValueError(f"not a 'show servers state' answer of format {_STATE_FORMAT}: {text.strip()[:200]!r}")
    header = lines[1].lstrip("#").split()
    need = ("be_name", "srv_name", "srv_addr", "srv_port", "srv_op_state", "srv_admin_state", "srv_uweight", "srv_iweight")
    missing = [n for n in need if n not in header]
    if missing:
        raise ValueError(f"'show servers state' has no {', '.join(missing)} column")
    col = {name: header.index(name) for name in need}
    out: list[ServerState] = []
    for line in lines[2:]:
        values = line.split()
        if len(values) < len(header):
            raise ValueError(f"a 'show servers state' line with {len(values)} of {len(header)} fields: {line!r}")
        out.append(
            ServerState(
                backend=values[col["be_name"]],
                name=values[col["srv_name"]],
                address=values[col["srv_addr"]],
                port=int(values[col["srv_port"]]),
                op_state=int(values[col["srv_op_state"]]),
                admin_state=int(values[col["srv_admin_state"]]),
                weight=int(values[col["srv_uweight"]]),
                initial_weight=int(values[col["srv_iweight"]]),
            )
        )
    return out


class HAProxyRuntime:
    """HAProxy's runtime API on its UNIX stats socket: one command per connection, each bounded by ``timeout_s``.

    One command per connection (not the interactive prompt): HAProxy answers and closes, so the answer is all
    that was read before EOF, and no connection is held between the canary's rare calls.
    """

    def __init__(self, socket_path: str, timeout_s: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s

    async def command(self, line: str) -> str:
        """HAProxy's answer to one command line; RuntimeFailure naming the socket if it cannot be asked."""
        if "\n" in line or ";" in line:
            raise ValueError(f"one command, without newlines or ';' (got {line!r})")
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_unix_connection(self.socket_path)
                try:
                    writer.write(line.encode() + b"\n")
                    await writer.drain()
                    answer = await reader.read()
                finally:
                    writer.close()
                    await writer.wait_closed()
        except TimeoutError as exc:
            raise RuntimeFailure(
                f"HAProxy runtime API {self.socket_path}: no answer to {line!r} within {self.timeout_s:g} s"
            ) from exc
        except OSError as exc:
            raise RuntimeFailure(f"HAProxy runtime API {self.socket_path}: cannot send {line!r}: {exc}") from exc
        return answer.decode("utf-8", errors="replace")

    async def execute(self, line: str) -> None:
        """Run a command that answers nothing when it succeeds (``set ...``); RuntimeFailure with HAProxy's words."""
        answer = (await self.command(line)).strip()
        if answer:
            raise RuntimeFailure(f"HAProxy runtime API {self.socket_path}: {line!r} answered: {answer}")

    async def servers_state(self, backend: str) -> list[ServerState]:
        answer = await self.command(f"show servers state {backend}")
        try:
            return parse_servers_state(answer)
        except ValueError as exc:
            raise RuntimeFailure(
                f"HAProxy runtime API {self.socket_path}: 'show servers state {backend}' answered: {answer.strip()[:300]}"
            ) from exc

    async def show_stat(self, backend: str) -> dict[str, ServerStat]:
        answer = await self.command("show stat")
        try:
            return parse_show_stat(answer, backend)
        except ValueError as exc:
            raise RuntimeFailure(
                f"HAProxy runtime API {self.socket_path}: 'show stat' answered: {answer.strip()[:300]} ({exc})"
            ) from exc


@dataclass(frozen=True)
class AppliedWeights:
    """One ``set_weights`` as HAProxy confirmed it: the step, the shares asked for, the weights read back."""

    step: int
    candidate: float
    control: float
    weights: dict[str, int]
    shares: dict[PoolName, float]
    drained: tuple[str, ...] = field(default=())


class HAProxyRouter(EngineRouter):
    """``TrafficRouter`` for ``engine: haproxy``: sets each server's weight and checks that HAProxy took it.

    Calls are serialised with a lock: a rollback issued while a step's commands run is applied after them,
    never interleaved with them. ``applied`` keeps what each call set, as read back.
    """

    def __init__(self, engine: HAProxyEngine, *, timeout_s: float = 5.0) -> None:
        self.engine = engine
        self.runtime = HAProxyRuntime(engine.socket, timeout_s)
        self.applied: list[AppliedWeights] = []
        self._lock = asyncio.Lock()

    async def read_back(self) -> dict[str, ServerState]:
        """The backend's servers by name; RuntimeFailure if one the rollout names is not in the backend."""
        states = {s.name: s for s in await self.runtime.servers_state(self.engine.backend)}
        wanted = [s for names in self.engine.pool_servers().values() for s in names]
        missing = [s for s in wanted if s not in states]
        if missing:
            raise RuntimeFailure(
                f"HAProxy runtime API {self.engine.socket}: backend {self.engine.backend} has no server "
                f"{', '.join(missing)} (it has {', '.join(states) or 'none'})"
            )
        return states

    async def set_weights(self, candidate: float, control: float, step: int) -> None:
        if step < 0:
            raise ValueError(f"step is the controller's 0-based index (got {step})")
        weights = haproxy_weights(self.engine, candidate, control)
        shares = realised_shares(self.engine, weights)
        speculative = self.engine.candidate_servers
        drain = self.engine.drain and candidate == 0.0
        async with self._lock:
            before = await self.read_back()
            # Falling weights first: at a rollback the speculative servers are at 0 before anything else changes.
            order = sorted(weights, key=lambda s: weights[s] >= before[s].weight)
            for server in order:
                await self.runtime.execute(f"set server {self.engine.backend}/{server} weight {weights[server]}")
            for server in speculative:
                if drain:
                    await self.runtime.execute(f"set server {self.engine.backend}/{server} state drain")
                elif self.engine.drain and candidate > 0 and before[server].draining:
                    await self.runtime.execute(f"set server {self.engine.backend}/{server} state ready")
            after = await self.read_back()
            wrong = [f"{s} weight {after[s].weight} (set {w})" for s, w in weights.items() if after[s].weight != w]
            wrong += [f"{s} not draining" for s in speculative if drain and not after[s].draining]
            undrained = self.engine.drain and candidate > 0
            wrong += [f"{s} still draining" for s in speculative if undrained and after[s].draining]
            if wrong:
                raise RuntimeFailure(
                    f"HAProxy runtime API {self.engine.socket}: backend {self.engine.backend} did not take the "
                    f"weights of step {step}: {'; '.join(wrong)}"
                )
            drained = tuple(s for s in speculative if after[s].draining)
            self.applied.append(AppliedWeights(step, candidate, control, weights, shares, drained))

    async def differs(self, candidate: float, control: float) -> str | None:
        """HAProxy's weights (``show servers state``) against those these shares set; a restarted HAProxy comes back
        with its configuration's weights (the speculative server at 0, seen in issue 28)."""
        weights = haproxy_weights(self.engine, candidate, control)
        async with self._lock:
            now = await self.read_back()
        wrong = [f"{s} weight {now[s].weight} (set {w})" for s, w in weights.items() if now[s].weight != w]
        if self.engine.drain and candidate > 0:
            wrong += [f"{s} draining" for s in self.engine.candidate_servers if now[s].draining]
        return "; ".join(wrong) or None

    def describe(self) -> str:
        return f"engine haproxy (backend {self.engine.backend}, runtime API {self.engine.socket})"

    async def server_stats(self) -> dict[str, ServerStat]:
        """HAProxy's counters for the backend's servers (sessions now, responses by class)."""
        return await self.runtime.show_stat(self.engine.backend)

    async def in_flight(self) -> dict[PoolName, int]:
        """Streams open on each pool's servers now, by HAProxy's count."""
        return pool_in_flight(self.engine, await self.server_stats())

    async def close(self) -> None:
        # Nothing is held between calls; waiting for the lock lets commands in progress finish.
        async with self._lock:
            pass
