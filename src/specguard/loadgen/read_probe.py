"""How late the client stamps a read: a probe that is read and stamped exactly as the streams are.

Every stream's read is stamped in the event loop's ``data_received`` (``client.ArrivalStampedBuffer``); the
record-writer child only parses what was stamped, so its load cannot make a stamp late, but anything that
keeps the loop from reaching ``data_received`` can. The loop-lag probe (``runner._Run.monitor_loop_lag``)
measures how late a 10 ms timer wakes: one sample per wake-up, so a busy stretch of 200 ms is one sample
among many idle ones, and its p99 can stay under the limit while a share of the reads is stamped late
(a loaded 2-core machine showed a client-side TTFT ratio of 3.1 between arms against the servers' own
1.13, and no lag warning). This probe samples in wall time instead: a thread writes its monotonic clock
into a socket pair every ``PERIOD_S``; the loop reads it through a protocol of its own, like a stream's
read, and the lag is the stamp minus the written time, which is the time between the kernel holding the
bytes and the client stamping them. A stall of the loop then gets one sample per period it lasts, and the
share of late samples is the share of reads stamped late.

``time.monotonic`` is CLOCK_MONOTONIC, one clock for every thread of the machine. The writer thread needs
the GIL for its write: a loop busy in Python gives it up every ``sys.getswitchinterval()`` (5 ms), so the
written time is at most that late, and the lag is undercounted by at most as much, never invented.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from typing import Final

from specguard.analysis.client_stalls import STALL_THRESHOLD_S

__all__ = ["PERIOD_S", "ReadLagProbe"]

PERIOD_S: Final = 0.01
_STAMP = struct.Struct(">d")


class _Reader(asyncio.Protocol):
    def __init__(self, probe: ReadLagProbe) -> None:
        self.probe = probe
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        buf = self.pending + data
        whole = len(buf) - len(buf) % _STAMP.size
        for (written,) in _STAMP.iter_unpack(buf[:whole]):
            self.probe.observe(written, now)
        self.pending = buf[whole:]


class ReadLagProbe:
    """Start with ``await start()`` on the loop that stamps the streams; ``stop()`` before reading ``lags``."""

    def __init__(self, t0: float = 0.0, period_s: float = PERIOD_S) -> None:
        self.t0 = t0
        self.period_s = period_s
        self.lags: list[float] = []  # seconds from the write to the stamp
        self.stalls: list[tuple[float, float]] = []  # run-clock seconds, as runner stalls: see analysis/client_stalls
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._wsock: socket.socket | None = None

    def observe(self, written: float, stamped: float) -> None:
        lag = max(0.0, stamped - written)
        self.lags.append(lag)
        if lag >= STALL_THRESHOLD_S:
            self.stalls.append((written - self.t0, stamped - self.t0))

    async def start(self) -> None:
        rsock, self._wsock = socket.socketpair()
        self._transport, _ = await asyncio.get_running_loop().create_connection(lambda: _Reader(self), sock=rsock)
        self._thread = threading.Thread(target=self._write, name="specguard-read-probe", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        wsock = self._wsock
        assert wsock is not None
        while not self._stop.wait(self.period_s):
            try:
                wsock.send(_STAMP.pack(time.monotonic()))
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._transport is not None:
            self._transport.close()
        if self._wsock is not None:
            self._wsock.close()
