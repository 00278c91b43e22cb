"""The HAProxy engine against the real HAProxy 2.6 (Debian's), started by the test with the generated configuration.

Behind it, scripted servers (fakes, for their per-request logs: which server served which request): the split
HAProxy makes under the weights specguard set, read back and counted at the servers; a rollback that drains the
candidate while one of its streams is in flight; stickiness by header; the errors of a wrong backend or socket.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specguard.canary.evidence.haproxy_stats import pool_responses
from specguard.canary.routers.base import TrafficRouter
from specguard.canary.routers.haproxy import HAProxyRouter
from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.rollout import Rollout
from specguard.errors import RuntimeFailure
from specguard.scripted.process import ScriptedProcess
from tests.haproxy_harness import HAProxyProcess, engine_of

SIGMAS = 4.5
SHORT = {"ttft_ms": 2.0, "interval_ms": 2.0, "chunks": 2}


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Not tmp_path: a UNIX socket path is at most 107 bytes, and pytest's directories can be longer.
    with tempfile.TemporaryDirectory(prefix="sg-hap-") as d:
        yield Path(d)


def haproxy_rollout(socket: Path, servers: dict[str, ScriptedProcess], **engine: Any) -> Rollout:
    pools = {pool: {"servers": [proc.base_url]} for pool, proc in servers.items()}
    doc: dict[str, Any] = {
        "type": "haproxy",
        "socket": str(socket),
        "backend": "vllm",
        "baseline_servers": ["baseline-1"],
        "candidate_servers": ["speculative-1"],
        **engine,
    }
    if "control" in servers:
        doc["control_servers"] = ["control-1"]
    return Rollout.model_validate({"engine": doc, "pools": pools, "admin": {"token_env": "CANARY_TOKEN"}})


def start_haproxy(rollout: Rollout, log_dir: Path) -> HAProxyProcess:
    proc = HAProxyProcess(rollout, log_dir)
    proc.__enter__()
    return proc


async def complete(
    session: aiohttp.ClientSession, url: str, max_tokens: int, headers: dict[str, str] | None = None
) -> tuple[str, bytes]:
    """One streamed completion through HAProxy: (its request id, the whole body)."""
    rid = uuid.uuid4().hex
    body = {"model": "scripted", "prompt": "x", "max_tokens": max_tokens, "stream": True}
    async with session.post(f"{url}/v1/completions", json=body, headers={"X-Request-Id": rid, **(headers or {})}) as resp:
        assert resp.status == 200, await resp.text()
        return rid, await resp.read()


async def many(url: str, n: int, concurrency: int = 8, headers: Callable[[int], dict[str, str]] | None = None) -> list[str]:
    """``n`` short completions, ``concurrency`` at a time; each ends with [DONE]. Their request ids, in order."""
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> str:
            async with sem:
                rid, raw = await complete(session, url, 2, headers(i) if headers else None)
                assert raw.rstrip().endswith(b"data: [DONE]")
                return rid

        return list(await asyncio.gather(*(one(i) for i in range(n))))


def served_by(servers: dict[str, ScriptedProcess], ids: list[str]) -> dict[str, str]:
    """Which pool's server logged each request id (every id exactly once).

    A server logs a request just after its last byte, so the client can have it a moment before the log
    does: the logs are read again until every id is there (a bounded wait, not a measurement).
    """
    wanted = set(ids)
    for _ in range(200):
        where: dict[str, str] = {}
        for pool, proc in servers.items():
            for rid in proc.chunk_logs():
                if rid in wanted:
                    assert rid not in where, f"{rid} served twice"
                    where[rid] = pool
        if set(where) == wanted:
            return where
        time.sleep(0.05)
    raise AssertionError(f"{len(wanted - set(where))} of {len(wanted)} requests were logged by no server")


def within_sigmas(count: int, n: int, p: float) -> bool:
    sigma = math.sqrt(n * p * (1 - p))
    return abs(count - n * p) <= SIGMAS * sigma if sigma > 0 else count == n * p


def test_weights_set_by_the_driver_are_read_back_and_seen_in_the_split(scripted: Any, socket_dir: Path, tmp_path: Path) -> None:
    servers = {pool: scripted(**SHORT) for pool in ("baseline", "candidate", "control")}
    rollout = haproxy_rollout(socket_dir / "admin.sock", servers)
    haproxy = start_haproxy(rollout, tmp_path / "haproxy")
    try:

        async def main() -> None:
            driver = HAProxyRouter(engine_of(rollout))
            assert isinstance(driver, TrafficRouter)
            for step, (candidate, control) in enumerate([(0.25, 0.10), (0.05, 0.05)]):
                await driver.set_weights(candidate, control, step)
                states = await driver.read_back()
                applied = driver.applied[-1]
                assert {name: states[name].weight for name in applied.weights} == applied.weights
                assert applied.shares == pytest.approx(
                    {"baseline": 1 - candidate - control, "candidate": candidate, "control": control}
                )
                n = 400
                ids = await many(haproxy.base_url, n)
                where = served_by(servers, ids)
                for pool, share in applied.shares.items():
                    count = sum(1 for p in where.values() if p == pool)
                    assert within_sigmas(count, n, share), (step, pool, count, n * share)
            await driver.close()

        asyncio.run(main())
    finally:
        haproxy.stop()


def test_a_rollback_drains_the_candidate_and_its_stream_in_flight_finishes(
    scripted: Any, socket_dir: Path, tmp_path: Path
) -> None:
    # The candidate's stream: 40 chunks 50 ms apart, so it is still streaming when the rollback lands.
    servers = {"baseline": scripted(**SHORT), "candidate": scripted(ttft_ms=5.0, interval_ms=50.0, chunks=40)}
    rollout = haproxy_rollout(socket_dir / "admin.sock", servers, drain=True)
    haproxy = start_haproxy(rollout, tmp_path / "haproxy")
    try:

        async def main() -> None:
            driver = HAProxyRouter(engine_of(rollout))
            await driver.set_weights(1.0, 0.0, 0)
            async with aiohttp.ClientSession() as session:
                rid = uuid.uuid4().hex
                body = {"model": "scripted", "prompt": "x", "max_tokens": 40, "stream": True}
                async with session.post(f"{haproxy.base_url}/v1/completions", json=body, headers={"X-Request-Id": rid}) as resp:
                    first = await resp.content.readline()
                    assert first.startswith(b"data: ")  # the stream is in flight on the candidate
                    assert (await driver.in_flight())["candidate"] == 1, "HAProxy counts the open stream"
                    await driver.set_weights(0.0, 0.0, 1)
                    states = await driver.read_back()
                    assert states["speculative-1"].weight == 0 and states["speculative-1"].draining
                    assert driver.applied[-1].drained == ("speculative-1",)
                    after = await many(haproxy.base_url, 100)
                    rest = await resp.read()
            assert (await driver.in_flight())["candidate"] == 0, "the drained stream is over"
            events = [e for e in (first + rest).split(b"\n\n") if e.strip()]
            assert events[-1] == b"data: [DONE]"
            assert sum(1 for e in events if b'"text"' in e) == 40, "the in-flight stream finished complete"
            where = served_by(servers, [rid, *after])
            assert where[rid] == "candidate"
            assert all(where[r] == "baseline" for r in after), "no new request reached the candidate after the rollback"
            # A later positive share takes the candidate out of drain again.
            await driver.set_weights(0.5, 0.0, 2)
            states = await driver.read_back()
            assert not states["speculative-1"].draining
            assert states["speculative-1"].weight == driver.applied[-1].weights["speculative-1"] > 0
            await driver.close()

        asyncio.run(main())
    finally:
        haproxy.stop()


def test_streamed_chunks_pass_haproxy_as_they_come_not_in_bursts(scripted: Any, socket_dir: Path, tmp_path: Path) -> None:
    """A chunk every 50 ms, read at the client as it arrives: the generated configuration's ``http-no-delay``
    keeps HAProxy from letting the kernel hold small writes (without it, bench/proxy_overhead.py saw chunks in
    bursts: client ITL p50 0 ms). The median gap is about the server's; a bursting path's is about zero."""
    servers = {"baseline": scripted(ttft_ms=5.0, interval_ms=50.0, chunks=20), "candidate": scripted(**SHORT)}
    rollout = haproxy_rollout(socket_dir / "admin.sock", servers)
    haproxy = start_haproxy(rollout, tmp_path / "haproxy")
    try:

        async def main() -> list[float]:
            body = {"model": "scripted", "prompt": "x", "max_tokens": 20, "stream": True}
            arrivals: list[float] = []
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{haproxy.base_url}/v1/completions", json=body) as resp:
                    async for line in resp.content:
                        if line.startswith(b"data: {") and b'"text"' in line:
                            arrivals.append(time.monotonic())
            return arrivals

        arrivals = asyncio.run(main())
    finally:
        haproxy.stop()
    assert len(arrivals) == 20
    gaps = sorted(b - a for a, b in zip(arrivals, arrivals[1:], strict=False))
    assert gaps[len(gaps) // 2] > 0.025, f"median gap {gaps[len(gaps) // 2] * 1000:.1f} ms: chunks came in bursts"


def test_the_pools_5xx_and_responses_are_haproxy_s_own_counts(scripted: Any, socket_dir: Path, tmp_path: Path) -> None:
    """Every second answer of the candidate is a 500 (fault injection); HAProxy's per-server counters, read by
    the driver and summed per pool, count exactly what the client received."""
    servers = {"baseline": scripted(**SHORT), "candidate": scripted(**SHORT, fault="http_500", fault_every=2)}
    rollout = haproxy_rollout(socket_dir / "admin.sock", servers)
    engine = engine_of(rollout)
    haproxy = start_haproxy(rollout, tmp_path / "haproxy")
    try:

        async def statuses(n: int) -> list[int]:
            body = {"model": "scripted", "prompt": "x", "max_tokens": 2, "stream": True}
            out = []
            async with aiohttp.ClientSession() as session:
                for _ in range(n):
                    async with session.post(f"{haproxy.base_url}/v1/completions", json=body) as resp:
                        await resp.read()
                        out.append(resp.status)
            return out

        async def main() -> None:
            driver = HAProxyRouter(engine)
            for candidate, n in ((1.0, 20), (0.0, 10)):
                await driver.set_weights(candidate, 0.0, 0)
                before = await driver.server_stats()
                seen = await statuses(n)
                counts = pool_responses(engine, before, await driver.server_stats())
                fivexx = sum(1 for s in seen if s >= 500)
                on = "candidate" if candidate else "baseline"
                off = "baseline" if candidate else "candidate"
                assert counts[on] == (fivexx, n) and counts[off] == (0, 0), (candidate, seen, counts)
                assert (fivexx > 0) == bool(candidate), seen
            await driver.close()

        asyncio.run(main())
    finally:
        haproxy.stop()


def test_a_sticky_header_keeps_a_client_on_its_server_and_keys_only_move_to_the_candidate(
    scripted: Any, socket_dir: Path, tmp_path: Path
) -> None:
    servers = {"baseline": scripted(**SHORT), "candidate": scripted(**SHORT)}
    rollout = haproxy_rollout(socket_dir / "admin.sock", servers, sticky_header="X-User-Id")
    haproxy = start_haproxy(rollout, tmp_path / "haproxy")
    users = [f"user-{i}" for i in range(40)]
    try:

        async def placement(candidate: float, step: int, driver: HAProxyRouter) -> dict[str, str]:
            await driver.set_weights(candidate, 0.0, step)
            ids = await many(haproxy.base_url, 3 * len(users), headers=lambda i: {"x-user-id": users[i % len(users)]})
            where = served_by(servers, ids)
            per_user: dict[str, set[str]] = {}
            for i, rid in enumerate(ids):
                per_user.setdefault(users[i % len(users)], set()).add(where[rid])
            assert all(len(pools) == 1 for pools in per_user.values()), "each user stays on one server"
            return {u: pools.pop() for u, pools in per_user.items()}

        async def main() -> None:
            driver = HAProxyRouter(engine_of(rollout))
            at_25 = await placement(0.25, 0, driver)
            at_50 = await placement(0.50, 1, driver)
            moved_back = [u for u in users if at_25[u] == "candidate" and at_50[u] != "candidate"]
            assert not moved_back, "raising the weight moves keys only from the baseline to the candidate"
            assert "candidate" in at_25.values() and "baseline" in at_50.values()
            await driver.close()

        asyncio.run(main())
    finally:
        haproxy.stop()


def test_haproxy_errors_name_the_socket_and_haproxy_s_answer(scripted: Any, socket_dir: Path, tmp_path: Path) -> None:
    servers = {"baseline": scripted(**SHORT), "candidate": scripted(**SHORT)}
    rollout = haproxy_rollout(socket_dir / "admin.sock", servers)
    haproxy = start_haproxy(rollout, tmp_path / "haproxy")
    engine = engine_of(rollout)
    try:

        async def refused(changed: HAProxyEngine) -> str:
            with pytest.raises(RuntimeFailure) as err:
                await HAProxyRouter(changed, timeout_s=5.0).set_weights(0.1, 0.0, 0)
            return str(err.value)

        async def main() -> None:
            wrong_backend = await refused(engine.model_copy(update={"backend": "nosuch"}))
            assert str(engine.socket) in wrong_backend and "Can't find backend." in wrong_backend
            wrong_server = await refused(engine.model_copy(update={"candidate_servers": ["speculative-9"]}))
            assert "has no server speculative-9" in wrong_server and "baseline-1, speculative-1" in wrong_server
            no_socket = await refused(engine.model_copy(update={"socket": str(socket_dir / "absent.sock")}))
            assert "absent.sock" in no_socket and "cannot send" in no_socket
            # Nothing was changed by the refused calls: the configuration's weights are still there.
            states = await HAProxyRouter(engine).read_back()
            assert (states["baseline-1"].weight, states["speculative-1"].weight) == (200, 0)

        asyncio.run(main())
    finally:
        haproxy.stop()


def test_a_rollback_issued_during_a_step_is_applied_after_it(scripted: Any, socket_dir: Path, tmp_path: Path) -> None:
    servers = {"baseline": scripted(**SHORT), "candidate": scripted(**SHORT)}
    rollout = haproxy_rollout(socket_dir / "admin.sock", servers, drain=True)
    haproxy = start_haproxy(rollout, tmp_path / "haproxy")
    try:

        async def main() -> None:
            driver = HAProxyRouter(engine_of(rollout))
            # The step's commands and the rollback's would interleave on the socket without the driver's lock.
            await asyncio.gather(driver.set_weights(0.5, 0.0, 3), driver.set_weights(0.0, 0.0, 3))
            assert [(a.candidate, a.step) for a in driver.applied] == [(0.5, 3), (0.0, 3)]
            states = await driver.read_back()
            assert states["speculative-1"].weight == 0 and states["speculative-1"].draining
            assert states["baseline-1"].weight == driver.applied[-1].weights["baseline-1"] > 0
            await driver.close()

        asyncio.run(main())
    finally:
        haproxy.stop()
