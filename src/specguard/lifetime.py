"""How specguard's processes run and end: helper priority, which signals interrupt, no child outliving its parent.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group;
``systemctl stop`` sends SIGTERM to every process of the unit's cgroup (and
SIGKILL after its timeout); ``docker stop`` sends SIGTERM to PID 1, SIGKILL
after 10 s; closing a terminal sends SIGHUP. specguard treats SIGTERM and
SIGHUP exactly like SIGINT: the command stops, keeps what it completed, and
exits 130.

Children: vLLM and scripted servers get ``PR_SET_PDEATHSIG`` (SIGTERM when
the parent dies, SIGKILL included) and are stopped as a process group. The
canary's proxy workers (``workers: N``) get SIGKILL as theirs: they ignore
SIGTERM, which ``systemctl stop`` sends the whole unit, and drain only when
the controller says; they also end when their socket to it closes. The
record writer and the scraper watch the pipe from their parent instead: it
closes when the parent dies, however it dies, and the record writer still has
to drain what is in it before it exits, which a death signal would prevent.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

INTERRUPT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """``preexec_fn`` for a child that must not outlive the thread that starts it (start it from the main thread)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
    except OSError:
        pass


def yield_cpu() -> None:
    """For helper children (record writer, scraper): run only when the timing process does not want the CPU.

    SCHED_IDLE, not just nice 10: at nice 10 the record writer still got about
    a tenth of a contended core in slices of a few milliseconds, and each slice
    taken from the busy-polling load generator showed up as 3-4 ms of timestamp
    error at p99 (200 streams, 2 cores); a SCHED_IDLE task is preempted at once.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(10)


def busy_poll_cpus() -> tuple[set[int], set[int]] | None:
    """(the load generator's CPU, its helpers' CPUs) for a busy-polling run, or None with fewer than two CPUs.

    A busy-polling client owns a core; anything else scheduled on that core
    takes its slice from the timestamps (3-4 ms at a time, measured with 200
    streams on 2 cores), so the helpers are kept off it. The lowest allowed
    CPU is the client's, so that a test can keep its own server off it too.
    """
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None
    if len(allowed) < 2:
        return None
    mine = {min(allowed)}
    return mine, allowed - mine


def set_cpus(cpus: set[int] | None) -> None:
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass


def ignore_interrupts() -> None:
    """For helper children that end when their parent closes their pipe: group signals must not cut them short."""
    for sig in (signal.SIGINT, *INTERRUPT_SIGNALS):
        signal.signal(sig, signal.SIG_IGN)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def terminations_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise KeyboardInterrupt in synchronous code, like SIGINT."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in INTERRUPT_SIGNALS:
            previous[sig] = signal.signal(sig, _raise_interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def terminations_cancel(cancel: Callable[[], Any]) -> Iterator[None]:
    """Inside a running event loop: SIGTERM and SIGHUP call ``cancel`` (which cancels the main task, as SIGINT does).

    The loop's own handlers are removed afterwards and the handlers that were
    there before are put back (asyncio would leave SIG_DFL behind, and a later
    SIGTERM would kill specguard without its clean-up).
    """
    import asyncio

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in INTERRUPT_SIGNALS}
    for sig in INTERRUPT_SIGNALS:
        loop.add_signal_handler(sig, cancel)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
