"""``workers: N``: the controller's process proxies as worker 0, and N - 1 worker processes (``worker.py``) accept on
the same port with SO_REUSEPORT, so that the proxy's CPU per request spreads over cores.

What the controller needs of the proxy holds across the processes:

* the split is ``choose_pool`` of the sticky key's hash, the same function of the same weights in every process,
  so a key goes to the same pool whichever process accepts its connection (keys without one are split per request
  by each process's own random numbers, as one process does);
* ``set_weights`` returns once every worker has answered with the weights now in effect, and the controller's
  read-back each window (``differs``) asks every worker again; a worker that has exited, or does not answer within
  ``REPLY_TIMEOUT_S``, is an engine failure (``RuntimeFailure``), reported as HAProxy unreachable is;
* the streams in flight a rollback drains are summed over the processes;
* every worker's records reach ``on_record`` in the controller's process, each once (worker k numbers its requests
  k, k + N, ...: ``seq % N`` says which process served one);
* a graceful stop sends ``STOP`` to every worker at once: each drains under the same ``drain_s`` deadline and
  reports what it had to cut; the counts are summed into the ``stopped`` event.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.canary.proxy import worker_protocol as wp
from specguard.canary.proxy.upstream import Upstream
from specguard.canary.spec.rollout import Split
from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state.records import ProxiedRequest
from specguard.errors import RuntimeFailure, ServerError
from specguard.lifetime import die_with_parent

__all__ = ["REPLY_TIMEOUT_S", "START_TIMEOUT_S", "ProxyWorkers"]

# A worker answers from its event loop between two reads: milliseconds even at 256 streams. Five seconds without
# an answer is a worker that is stuck, and the controller treats it as an engine it cannot reach.
REPLY_TIMEOUT_S = 5.0
# Importing aiohttp, pydantic and the proxy takes about a second on an idle core; a loaded 2-core CI host, more.
START_TIMEOUT_S = 60.0


def _pdeathsig_kill() -> None:
    # SIGKILL, not SIGTERM: the worker ignores SIGTERM (systemctl stop's SIGTERM to the whole unit must not cut its
    # streams before the controller's drain), so only SIGKILL ends it when the controller dies.
    die_with_parent(signal.SIGKILL)


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pid: int = 0
    replies: dict[int, asyncio.Future[tuple[Any, ...]]] = field(default_factory=dict)
    stopped: asyncio.Future[tuple[int, int]] | None = None
    gone: str | None = None  # why it can no longer be asked (exited, or its socket closed)
    task: asyncio.Task[None] | None = None

    @property
    def who(self) -> str:
        return f"proxy worker {self.index} (pid {self.pid or self.proc.pid})"


class ProxyWorkers:
    """The N - 1 worker processes of one proxy; the controller's own ``CanaryProxy`` is worker 0."""

    def __init__(self, count: int, *, on_record: Callable[[ProxiedRequest], None], log: Callable[[str], None]) -> None:
        if count < 1:
            raise ValueError(f"a proxy has at least one process (got {count})")
        self.count = count
        self.on_record = on_record
        self.log = log
        self.weights: tuple[float, float, int] = (0.0, 0.0, 0)  # the latest set: what a worker starts with
        self._workers: list[_Worker] = []
        self._ids = itertools.count(1)
        self.drain_s = 0.0

    @property
    def pids(self) -> list[int]:
        return [w.pid or w.proc.pid for w in self._workers]

    # -- start --------------------------------------------------------------------------------------------------

    async def start(
        self, listen: str, pools: Mapping[PoolName, Sequence[Upstream]], split: Split, *, drain_s: float, log_dir: Path
    ) -> None:
        """Start workers 1..N-1 and wait until each listens with the weights set so far; ``ServerError`` if one cannot."""
        if self.count > (os.cpu_count() or 1):
            self.log(f"warning: workers: {self.count} asks for more proxy processes than this host's {os.cpu_count()} CPUs")
        self.drain_s = drain_s
        try:
            for index in range(1, self.count):
                config = wp.WorkerConfig(index, self.count, listen, dict(pools), split, self.weights, drain_s)
                self._workers.append(await self._spawn(config, log_dir / f"proxy-worker-{index}.log"))
            await asyncio.wait_for(asyncio.gather(*(self._ready(w) for w in self._workers)), START_TIMEOUT_S)
        except BaseException:
            self.kill()
            raise
        for w in self._workers:
            w.task = asyncio.ensure_future(self._listen(w))

    async def _spawn(self, config: wp.WorkerConfig, log_path: Path) -> _Worker:
        ours, theirs = socket.socketpair()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as err:
            proc = subprocess.Popen(  # noqa: S603  our own module, an argument list
                [sys.executable, "-m", "specguard.canary.proxy.worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                preexec_fn=_pdeathsig_kill,  # noqa: PLW1509  lifetime.py's way: set before exec, from this thread
            )
        theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        writer.write(wp.encode((wp.CONFIG, config)))
        return _Worker(config.index, proc, reader, writer)

    async def _ready(self, w: _Worker) -> None:
        message = await wp.read_message(w.reader)
        if message is not None and message[0] == wp.READY:
            w.pid = int(message[1])
            return
        why = message[1] if message is not None and message[0] == wp.FAILED else f"{w.who} exited before it listened"
        raise ServerError(f"{why} (its log: proxy-worker-{w.index}.log)")

    async def _listen(self, w: _Worker) -> None:
        """Everything a worker sends after it is ready, until its socket closes."""
        while (message := await wp.read_message(w.reader)) is not None:
            kind = message[0]
            if kind == wp.RECORDS:
                for record in message[1]:
                    self.on_record(record)
            elif kind == wp.STOPPED:
                if w.stopped is not None and not w.stopped.done():
                    w.stopped.set_result((int(message[1]), int(message[2])))
            elif (reply := w.replies.pop(int(message[1]), None)) is not None and not reply.done():
                reply.set_result(message)
        code = await asyncio.to_thread(w.proc.wait)
        w.gone = f"{w.who} exited with code {code}"
        if w.stopped is None:
            self.log(f"!!! {w.gone}: the proxy carries on in the other processes")
        for reply in w.replies.values():
            if not reply.done():
                reply.set_exception(RuntimeFailure(w.gone))
        if w.stopped is not None and not w.stopped.done():
            w.stopped.set_exception(RuntimeFailure(w.gone))

    # -- the controller's side ----------------------------------------------------------------------------------

    def send_weights(self, candidate: float, control: float, step: int) -> None:
        """Tell every worker, without waiting (a critical drop, from the record callback); ``confirm`` waits."""
        self.weights = (candidate, control, step)
        for w in self._workers:
            if w.gone is None:
                w.writer.write(wp.encode((wp.WEIGHTS, 0, candidate, control, step)))

    async def _ask(self, w: _Worker, kind: str, *args: object) -> tuple[Any, ...]:
        if w.gone is not None:
            raise RuntimeFailure(w.gone)
        ident = next(self._ids)
        reply: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()
        w.replies[ident] = reply
        w.writer.write(wp.encode((kind, ident, *args)))
        try:
            return await asyncio.wait_for(reply, REPLY_TIMEOUT_S)
        except TimeoutError:
            w.replies.pop(ident, None)
            raise RuntimeFailure(f"{w.who} did not answer within {REPLY_TIMEOUT_S:g} s") from None

    async def set_weights(self, candidate: float, control: float, step: int) -> None:
        """Every worker's weights, confirmed: ``RuntimeFailure`` naming the first worker that did not take them."""
        self.weights = (candidate, control, step)
        answers = await asyncio.gather(*(self._ask(w, wp.WEIGHTS, candidate, control, step) for w in self._workers))
        for w, answer in zip(self._workers, answers, strict=True):
            if (drift := wp.weights_differ(w.who, tuple(answer[2:5]), candidate, control)) is not None:
                raise RuntimeFailure(f"{drift} after the controller set them")

    async def differs(self, candidate: float, control: float) -> str | None:
        """What the first worker that differs reports; ``RuntimeFailure`` when one cannot be asked."""
        answers = await asyncio.gather(*(self._ask(w, wp.READ) for w in self._workers))
        for w, answer in zip(self._workers, answers, strict=True):
            if (drift := wp.weights_differ(w.who, tuple(answer[2:5]), candidate, control)) is not None:
                return drift
        return None

    async def in_flight(self) -> list[dict[PoolName, int]]:
        """Each live worker's streams in flight (a worker that exited has none left)."""
        live = [w for w in self._workers if w.gone is None]
        answers = await asyncio.gather(*(self._ask(w, wp.FLIGHT) for w in live), return_exceptions=True)
        return [dict(a[2]) for a in answers if isinstance(a, tuple)]

    # -- stop ---------------------------------------------------------------------------------------------------

    async def stop(self) -> tuple[int, int]:
        """Every worker drains under its ``drain_s``, sends its last records and exits: (still in flight, cut) summed."""
        loop = asyncio.get_running_loop()
        for w in self._workers:
            w.stopped = loop.create_future()
            if w.gone is None:
                w.writer.write(wp.encode((wp.STOP,)))
            else:
                w.stopped.set_result((0, 0))
        still = cut = 0
        for w in self._workers:
            assert w.stopped is not None
            try:
                # Each worker cuts its streams at drain_s itself; the margin is for its last records and its exit.
                one_still, one_cut = await asyncio.wait_for(asyncio.shield(w.stopped), self.drain_s + REPLY_TIMEOUT_S)
            except (RuntimeFailure, TimeoutError) as exc:
                self.log(f"!!! {w.who} did not stop cleanly: {exc or 'no answer'}; killed")
                w.proc.kill()
                continue
            still, cut = still + one_still, cut + one_cut
        for w in self._workers:
            if w.task is not None:
                await w.task  # its socket has closed and the process has been waited for
        return still, cut

    def kill(self) -> None:
        """For a start that failed half-way: no worker is left behind."""
        for w in self._workers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
            w.writer.close()
