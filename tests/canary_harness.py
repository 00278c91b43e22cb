"""A canary run inside a test: a rollout file over given servers, the controller on the test's event loop, and a
bounded client that counts what it sent and got back (the other end of "nothing lost or duplicated")."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from specguard.canary.control.run import CanaryOutcome, run_canary
from specguard.canary.spec.rollout import Rollout, load_rollout
from specguard.canary.state.records import CanaryEvent
from specguard.canary.state.store import CanaryStore
from specguard.vllm.process import free_port

TOKEN = "test-admin-token-3f9a"  # noqa: S105  a test's own token, set in the environment by the tests
TOKEN_ENV = "SPECGUARD_TEST_CANARY_TOKEN"
# The least a rollout file may say: the two pools and where the admin token is.
MINIMAL_ROLLOUT = """\
pools:
  baseline:
    servers: ["http://127.0.0.1:8000"]
  candidate:
    servers: ["http://127.0.0.1:8001"]
admin:
  token_env: CANARY_TOKEN
"""


def write_rollout(tmp: Path, pools: dict[str, list[str]], **sections: Any) -> Path:
    """A rollout file over these servers on free ports, with the test's sections merged over small defaults."""
    doc: dict[str, Any] = {
        "name": "test-canary",
        "listen": f"127.0.0.1:{free_port()}",
        "pools": {name: {"servers": urls} for name, urls in pools.items()},
        "split": {"sticky": {"source": "user"}, "segment": {"source": "none"}},
        "admin": {"listen": f"127.0.0.1:{free_port()}", "token_env": TOKEN_ENV},
        "state": {"path": str(tmp / "state.sqlite")},
    }
    for key, value in sections.items():
        doc[key] = value
    path = tmp / "rollout.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class Tally:
    """What the client sent and received: one entry per request it sent."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    status: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


async def drive(
    url: str,
    *,
    requests: int,
    concurrency: int,
    keys: Callable[[int], str | None] = lambda i: None,
    max_tokens: int = 8,
    stop: asyncio.Event | None = None,
    pace_s: float = 0.0,
    tag: str = "r",
) -> Tally:
    """``requests`` streamed completions through the proxy, ``concurrency`` at a time (bounded in count and time)."""
    tally = Tally()
    queue = list(range(requests))
    queue.reverse()
    timeout = aiohttp.ClientTimeout(total=120)

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue and not (stop and stop.is_set()):
            i = queue.pop()
            body: dict[str, Any] = {"model": "scripted", "prompt": f"request {i}", "max_tokens": max_tokens, "stream": True}
            key = keys(i)
            if key is not None:
                body["user"] = key
            tally.sent += 1
            # The proxy keeps a client's X-Request-Id as the record's request_id: the test can join both ends.
            rid = f"{tag}-{i}-{key}" if key is not None else f"{tag}-{i}"
            tally.request_ids.append(rid)
            try:
                async with session.post(f"{url}/v1/completions", json=body, headers={"X-Request-Id": rid}) as resp:
                    tally.status[resp.status] = tally.status.get(resp.status, 0) + 1
                    text = (await resp.read()).decode()
                    if resp.status == 200 and text.rstrip().endswith("data: [DONE]") and '"error"' not in text:
                        tally.ok += 1
                    else:
                        tally.failed += 1
                        tally.errors.append(f"HTTP {resp.status}: {text[-200:]}")
            except (aiohttp.ClientError, TimeoutError) as exc:
                tally.failed += 1
                tally.errors.append(f"{type(exc).__name__}: {exc}")
            if pace_s:
                await asyncio.sleep(pace_s)

    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return tally


def user_keys(n: int, seed: int = 0) -> Callable[[int], str]:
    rng = random.Random(seed)
    names = [f"user-{rng.getrandbits(40):010x}" for _ in range(n)]
    return lambda i: names[i % n]


class CanaryRun:
    """``run_canary`` as a background task of the test's loop; events read from its state file."""

    def __init__(self, rollout_path: Path, log_dir: Path, *, exit_when_finished: bool = True, drain_s: float = 5.0) -> None:
        self.rollout: Rollout = load_rollout(rollout_path)
        self.log_dir = log_dir
        self.exit_when_finished = exit_when_finished
        self.drain_s = drain_s
        self.stop = asyncio.Event()
        self.lines: list[str] = []
        self.task: asyncio.Task[CanaryOutcome] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.rollout.listen}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.rollout.admin.listen}"

    def start(self) -> None:
        self.task = asyncio.ensure_future(
            run_canary(
                self.rollout,
                log=self.lines.append,
                log_dir=self.log_dir,
                exit_when_finished=self.exit_when_finished,
                drain_s=self.drain_s,
                stop=self.stop,
            )
        )

    async def ready(self, timeout_s: float = 30.0) -> None:
        """Until the proxy answers (or the run failed, whose error is raised)."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                assert self.task is not None
                if self.task.done():
                    self.task.result()
                    raise AssertionError("the canary ended before it served")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with s.get(f"{self.admin_url}/status", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.1)
        raise AssertionError("the canary did not come up")

    async def finish(self, timeout_s: float = 60.0) -> CanaryOutcome:
        assert self.task is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self.task), timeout_s)
        except TimeoutError:
            self.stop.set()
            return await asyncio.wait_for(self.task, 30)

    async def stopped(self) -> CanaryOutcome:
        self.stop.set()
        assert self.task is not None
        return await asyncio.wait_for(self.task, 60)

    def events(self, *kinds: str) -> list[CanaryEvent]:
        with CanaryStore.open_existing(Path(self.rollout.state.path)) as store:
            return store.events(kinds=kinds or None)

    def store(self) -> CanaryStore:
        return CanaryStore.open_existing(Path(self.rollout.state.path))


@contextlib.asynccontextmanager
async def running(run: CanaryRun) -> AsyncIterator[CanaryRun]:
    run.start()
    try:
        await run.ready()
        yield run
    finally:
        if run.task is not None and not run.task.done():
            run.stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run.task, 60)


async def wait_until(run: CanaryRun, done: Callable[[], object], timeout_s: float) -> None:
    """Poll ``done`` (reading the state file) until it is true; fail at the deadline or if the canary ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return
        assert run.task is not None
        if run.task.done():
            run.task.result()
            if done():
                return
            raise AssertionError("the canary ended first")
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {timeout_s:g} s; log: {run.lines[-5:]}")
