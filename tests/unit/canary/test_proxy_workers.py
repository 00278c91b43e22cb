"""``workers: N`` (issue 28 section 7): the rollout key, the messages between the controller and its proxy workers,
and how the workers' answers merge (records each once, weights confirmed by every worker, streams in flight summed).
The processes themselves are in tests/system/test_canary_proxy_workers.py."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specguard.canary.proxy import worker_protocol as wp
from specguard.canary.proxy.server import CanaryProxy
from specguard.canary.proxy.split import choose_pool, key_hash
from specguard.canary.proxy.workers import ProxyWorkers, _Worker
from specguard.canary.routers.proxy import ProxyRouter
from specguard.canary.spec.rollout import MAX_PROXY_WORKERS, RolloutError, Split, StickyKey, load_rollout
from specguard.canary.state.records import ProxiedRequest
from specguard.errors import RuntimeFailure
from tests.canary_harness import MINIMAL_ROLLOUT
from tests.unit.canary.proxy_fakes import completion, fake, proxied


def load(tmp_path: Path, extra: str) -> Any:
    path = tmp_path / "rollout.yaml"
    path.write_text(MINIMAL_ROLLOUT + extra)
    return load_rollout(path)


def test_workers_default_to_one_and_take_an_integer_up_to_the_stated_maximum(tmp_path: Path) -> None:
    assert load(tmp_path, "").workers == 1
    assert load(tmp_path, "workers: 2\n").workers == 2
    assert load(tmp_path, f"workers: {MAX_PROXY_WORKERS}\n").workers == MAX_PROXY_WORKERS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "greater than or equal to 1"),
        (str(MAX_PROXY_WORKERS + 1), f"less than or equal to {MAX_PROXY_WORKERS}"),
        ("2.5", "valid integer"),
        ("true", "valid integer"),
        ("two", "valid integer"),
    ],
)
def test_a_wrong_workers_value_names_the_file_line_key_and_what_was_expected(tmp_path: Path, value: str, expected: str) -> None:
    with pytest.raises(RolloutError) as err:
        load(tmp_path, f"workers: {value}\n")
    text = str(err.value)
    line = len(MINIMAL_ROLLOUT.splitlines()) + 1
    assert f"rollout.yaml:{line}:" in text and "key 'workers'" in text and expected in text, text


def record(seq: int, pool: str = "baseline") -> ProxiedRequest:
    return ProxiedRequest(
        seq=seq,
        request_id=f"canary-{seq}",
        attempt=1,
        retried=False,
        received_unix=1.0e9 + seq,
        pool=pool,  # type: ignore[arg-type]
        server="http://127.0.0.1:8001",
        step=0,
        candidate_weight=0.25,
        segment="all",
        api="completions",
        stream=True,
        in_flight=0,
        ok=True,
        error=None,
        http_status=200,
        ttft_s=0.01,
        e2e_s=0.05,
        stream_end_s=0.05,
        chunk_times_s=[0.01, 0.05],
        chunk_tokens=[1, 1],
        token_source="server_usage",
        prompt_tokens=3,
        output_tokens=2,
        finish_reason="length",
    )


async def test_a_message_survives_its_framing_records_included() -> None:
    reader = asyncio.StreamReader()
    batch = [record(1), record(3, "candidate")]
    reader.feed_data(wp.encode((wp.RECORDS, batch)) + wp.encode((wp.FLIGHT, 7, {"baseline": 2})))
    reader.feed_eof()
    assert await wp.read_message(reader) == (wp.RECORDS, batch)
    assert await wp.read_message(reader) == (wp.FLIGHT, 7, {"baseline": 2})
    assert await wp.read_message(reader) is None  # the other end closed


def test_streams_in_flight_are_summed_per_pool_over_the_processes() -> None:
    total = wp.sum_in_flight([{"baseline": 2, "candidate": 1}, {"baseline": 3, "control": 4}, {}])
    assert total == {"baseline": 5, "candidate": 1, "control": 4}


def test_a_worker_whose_weights_differ_is_named_with_what_it_routes() -> None:
    assert wp.weights_differ("proxy worker 1 (pid 9)", (0.25, 0.25, 2), 0.25, 0.25) is None
    text = wp.weights_differ("proxy worker 1 (pid 9)", (0.0, 0.0, 2), 0.25, 0.25)
    assert text == "proxy worker 1 (pid 9) routes candidate 0 %, control 0 % (step 3) where the controller set 25 % and 25 %"


class _Writer:
    """The controller's end of a worker's socket: what it wrote, decoded."""

    def __init__(self, on_write: Callable[[tuple[Any, ...]], None]) -> None:
        self.on_write = on_write
        self.closed = False

    def write(self, data: bytes) -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()

        async def decode() -> None:
            while (message := await wp.read_message(reader)) is not None:
                self.on_write(message)

        asyncio.ensure_future(decode())

    def close(self) -> None:
        self.closed = True


class _Proc:
    pid = 4242

    def __init__(self, code: int) -> None:
        self.code = code

    def wait(self) -> int:
        return self.code

    def poll(self) -> int:
        return self.code


def fake_workers(answers: dict[int, Callable[[tuple[Any, ...]], tuple[Any, ...] | None]]) -> tuple[ProxyWorkers, list[Any]]:
    """A ProxyWorkers whose workers are in-memory streams answering as ``answers[index]`` says (None: no answer)."""
    got: list[ProxiedRequest] = []
    workers = ProxyWorkers(len(answers) + 1, on_record=got.append, log=lambda _: None)
    for index, answer in answers.items():
        reader = asyncio.StreamReader()

        def on_write(message: tuple[Any, ...], reader: asyncio.StreamReader = reader, answer: Any = answer) -> None:
            reply = answer(message)
            if reply is not None:
                reader.feed_data(wp.encode(reply))

        w = _Worker(index, _Proc(0), reader, _Writer(on_write), pid=1000 + index)  # type: ignore[arg-type]
        workers._workers.append(w)
        w.task = asyncio.ensure_future(workers._listen(w))
    return workers, got


def obedient(message: tuple[Any, ...]) -> tuple[Any, ...] | None:
    held = obedient.weights  # type: ignore[attr-defined]
    if message[0] == wp.WEIGHTS:
        held[:] = message[2:5]
    if message[0] in (wp.WEIGHTS, wp.READ):
        return (wp.WEIGHTS, message[1], *held)
    if message[0] == wp.FLIGHT:
        return (wp.FLIGHT, message[1], {"candidate": 1})
    return None


async def test_weights_are_confirmed_by_every_worker_and_in_flight_is_summed() -> None:
    obedient.weights = [0.0, 0.0, 0]  # type: ignore[attr-defined]
    workers, _ = fake_workers({1: obedient})
    proxy = make_proxy(seq_start=0, seq_step=2)
    router = ProxyRouter(proxy, workers)
    await router.set_weights(0.25, 0.0, 1)
    assert proxy.weights() == (0.25, 0.0, 1) and obedient.weights == [0.25, 0.0, 1]  # type: ignore[attr-defined]
    assert await router.differs(0.25, 0.0) is None
    assert await router.in_flight() == {"baseline": 0, "candidate": 1}
    # A critical drop is sent without waiting; the worker takes it all the same.
    router.set_weights_now(0.0, 0.0, 1)
    await asyncio.sleep(0.01)
    assert obedient.weights == [0.0, 0.0, 1]  # type: ignore[attr-defined]
    # Weights the proxy refuses are refused before any worker is told.
    with pytest.raises(ValueError, match="sum past 1"):
        router.set_weights_now(0.7, 0.7, 1)
    assert obedient.weights == [0.0, 0.0, 1]  # type: ignore[attr-defined]


async def test_a_worker_that_keeps_other_weights_is_drift_and_one_that_exited_is_an_engine_failure() -> None:
    def stuck(message: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return (wp.WEIGHTS, message[1], 0.0, 0.0, 0) if message[0] in (wp.WEIGHTS, wp.READ) else None

    workers, _ = fake_workers({1: stuck})
    router = ProxyRouter(make_proxy(), workers)
    with pytest.raises(RuntimeFailure, match=r"proxy worker 1 \(pid 1001\) routes candidate 0 %"):
        await router.set_weights(0.25, 0.0, 1)
    assert "proxy worker 1 (pid 1001) routes candidate 0 %" in str(await router.differs(0.25, 0.0))
    workers._workers[0].reader.feed_eof()  # its socket closed: the process has gone
    await asyncio.sleep(0.05)
    with pytest.raises(RuntimeFailure, match=r"proxy worker 1 \(pid 1001\) exited with code 0"):
        await router.differs(0.25, 0.0)
    assert await router.in_flight() == {"baseline": 0, "candidate": 0}  # a worker that has gone has no stream left


async def test_every_workers_records_reach_the_controller_once_in_the_order_sent() -> None:
    workers, got = fake_workers({1: lambda m: None, 2: lambda m: None})
    one, two = workers._workers
    one.reader.feed_data(wp.encode((wp.RECORDS, [record(1), record(4)])) + wp.encode((wp.RECORDS, [record(7)])))
    two.reader.feed_data(wp.encode((wp.RECORDS, [record(2), record(5)])))
    loop = asyncio.get_running_loop()
    for w, still, cut in ((one, 0, 1), (two, 1, 2)):
        w.stopped = loop.create_future()
        w.reader.feed_data(wp.encode((wp.STOPPED, still, cut)))
        w.reader.feed_eof()
    workers.drain_s = 1.0
    assert await workers.stop() == (1, 3)  # in flight at the deadline and cut at shutdown, summed
    assert sorted(r.seq for r in got) == [1, 2, 4, 5, 7]
    assert [r.seq for r in got if r.seq % 3 == 1] == [1, 4, 7]


def make_proxy(seq_start: int = 0, seq_step: int = 1, pools: dict[str, list[Any]] | None = None, **kw: Any) -> CanaryProxy:
    from specguard.canary.proxy.upstream import Upstream

    pools = pools or {"baseline": [Upstream("http://127.0.0.1:9", "")], "candidate": [Upstream("http://127.0.0.1:10", "")]}
    return CanaryProxy(pools, Split(), on_record=lambda r: None, seq_start=seq_start, seq_step=seq_step, **kw)  # type: ignore[arg-type]


async def test_two_proxies_of_one_rollout_route_every_key_alike_control_pool_included() -> None:
    """What makes SO_REUSEPORT workers safe: whichever process accepts a keyed request sends it to the same pool."""
    split = Split(sticky=StickyKey(source="user"))
    async with fake("baseline") as base, fake("candidate") as cand, fake("control") as ctl:
        pools = {"baseline": [base.upstream()], "candidate": [cand.upstream()], "control": [ctl.upstream()]}
        records: list[list[ProxiedRequest]] = [[], []]
        proxies = [
            CanaryProxy(pools, split, on_record=records[k].append, seq_start=k, seq_step=2, seed=k)  # type: ignore[arg-type]
            for k in range(2)
        ]
        for p in proxies:
            p.set_weights(0.25, 0.25, 1)
        keys = [f"user-{i:03d}" for i in range(60)]
        async with proxied(proxies[0]) as url0, proxied(proxies[1]) as url1, aiohttp.ClientSession() as session:
            for url in (url0, url1):
                for key in keys:
                    async with session.post(f"{url}/v1/completions", json=completion(user=key)) as resp:
                        await resp.read()
            for p in proxies:
                p.flush()
    by_key = [{r.request_id: r for r in rs} for rs in records]
    pool_of = [{key: r.pool for r, key in zip(rs, keys, strict=True)} for rs in records]
    assert pool_of[0] == pool_of[1]
    assert pool_of[0] == {k: choose_pool(key_hash(k), 0.25, 0.5, 0.25) for k in keys}
    assert set(pool_of[0].values()) == {"baseline", "candidate", "control"}  # 60 keys reach all three bands
    # seq (and the default request id) stay apart: worker k numbers k, k + 2, ...
    assert {r.seq % 2 for r in records[0]} == {0} and {r.seq % 2 for r in records[1]} == {1}
    assert not set(by_key[0]) & set(by_key[1])
    assert os.getpid()  # all in this process: the processes are the system test's
