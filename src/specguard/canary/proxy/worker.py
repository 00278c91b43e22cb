"""One proxy worker of ``workers: N``: a ``CanaryProxy`` in a process of its own, on the rollout's listen port.

Started by ``workers.ProxyWorkers`` as ``python -m specguard.canary.proxy.worker FD`` with one end of a socket pair
as FD. It binds ``listen`` with SO_REUSEPORT beside the controller's process (the kernel spreads new connections
over the listeners), splits with the same key hash (``split.choose_pool``: a key goes to the same pool whichever
process accepts it), and sends every finished attempt's record to the controller, batched for at most
``RECORD_BATCH_S``. It ignores SIGINT, SIGTERM and SIGHUP: ``systemctl stop`` signals every process of the unit,
and the controller's ``STOP`` starts this worker's drain under the controller's one deadline. It ends when the
controller's end of the socket closes, and ``PR_SET_PDEATHSIG`` (SIGKILL, set before exec) ends it when the
controller dies any other way, SIGKILL included.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from aiohttp import web

from specguard.canary.proxy import worker_protocol as wp
from specguard.canary.proxy.server import CanaryProxy, tune_gc
from specguard.canary.spec.rollout import split_listen
from specguard.canary.state.records import ProxiedRequest
from specguard.lifetime import ignore_interrupts

__all__ = ["RECORD_BATCH_S", "main"]

# Records go to the controller at most this long after they are made: one write per batch instead of one per
# record, and still well inside the shortest burst window a rollout may set (crit bursts count within seconds).
RECORD_BATCH_S = 0.02


class _Outbox:
    """Records batched for the controller, and the writer every message goes through."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.records: list[ProxiedRequest] = []
        self._scheduled = False

    def send(self, message: tuple[object, ...]) -> None:
        self.writer.write(wp.encode(message))

    def add(self, record: ProxiedRequest) -> None:
        self.records.append(record)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_later(RECORD_BATCH_S, self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if self.records:
            batch, self.records = self.records, []
            self.send((wp.RECORDS, batch))


async def _serve(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    first = await wp.read_message(reader)
    if first is None or first[0] != wp.CONFIG:
        return 2
    config: wp.WorkerConfig = first[1]
    out = _Outbox(writer)
    proxy = CanaryProxy(config.pools, config.split, on_record=out.add, seq_start=config.index, seq_step=config.count)
    proxy.set_weights(*config.weights)
    host, port = split_listen(config.listen)
    runner = web.AppRunner(proxy.app(), shutdown_timeout=config.drain_s, access_log=None, handler_cancellation=True)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, backlog=1024, reuse_port=True).start()
    except OSError as exc:
        out.send((wp.FAILED, f"proxy worker {config.index} cannot listen on {config.listen}: {exc.strerror or exc}"))
        await writer.drain()
        await runner.cleanup()
        return 4
    tune_gc()
    out.send((wp.READY, os.getpid()))
    while (message := await wp.read_message(reader)) is not None:
        kind = message[0]
        if kind == wp.WEIGHTS:
            proxy.set_weights(*message[2:5])
            out.send((wp.WEIGHTS, message[1], *proxy.weights()))
        elif kind == wp.READ:
            out.send((wp.WEIGHTS, message[1], *proxy.weights()))
        elif kind == wp.FLIGHT:
            out.send((wp.FLIGHT, message[1], proxy.in_flight()))
        elif kind == wp.STOP:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + config.drain_s
            proxy.begin_shutdown()
            await runner.cleanup()  # waits for the handlers up to drain_s, then cancels them: cut at shutdown
            still = await proxy.drain(max(0.0, deadline - loop.time()))
            await proxy.close()
            out.flush()
            out.send((wp.STOPPED, still, proxy.cut_at_shutdown))
            await writer.drain()
            writer.close()
            return 0
    return 0  # the controller's end closed without a STOP: it is gone, and so is this worker


def main(argv: list[str]) -> int:
    ignore_interrupts()
    fd = int(argv[1])
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_serve(fd))
    return uvloop.run(_serve(fd))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
