"""The rollout's hooks (``hooks.rollback``, ``hooks.promote``): argument lists run without a shell, each bounded in time.

A rollback hook runs while something is already wrong, the worst moment for quoting surprises or a hung
command: so a hook is ``exec``'d directly (shell metacharacters reach the program literally), reads nothing
(stdin is /dev/null), runs in its own process group, and is killed with that whole group on timeout
(SIGTERM, then SIGKILL after a grace of ``KILL_GRACE_S``). Whatever is left of its group when the hook itself
exits is killed too, and on cancellation (the controller stopping). Should the controller itself be killed,
the hook gets ``PR_SET_PDEATHSIG`` (SIGTERM, even when the controller dies of SIGKILL); the hook's own children
are then its responsibility. A hook that must leave a service running should ask a service manager to run it
(``systemctl start``), whose processes are not in the hook's group.

Failing to start (a program that does not exist or is not executable) is a failed result, not an exception,
and is not retried: it fails the same way every time.

Order: ``run_hooks`` stops at the first command that still fails after its retries, as ``set -e`` stops a
runbook script. Later steps usually presuppose earlier ones: a rollback of ``stop candidate`` then ``start
spare baseline`` on the same GPUs must not start the spare while the candidate may still hold the memory;
when a step fails, the state is unknown and a person has to look. The canary's own safety action should not
wait on hooks: the controller sets the candidate's weight to 0 (and commits that) before it runs them.
``keep_going=True`` runs every command regardless (for independent notifications).
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

from specguard.lifetime import die_with_parent

__all__ = ["KILL_GRACE_S", "OUTPUT_TAIL_BYTES", "HookResult", "HookRunner", "run_hook", "run_hooks"]

OUTPUT_TAIL_BYTES = 4096  # per stream: the end of the output is where a failing command says why
KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL on timeout: time for a command to undo a half-done step


@dataclass(frozen=True)
class HookResult:
    """One attempt of one hook command.

    ``exit_code`` is the process's status, negative for a signal (``-15`` for SIGTERM, as ``subprocess`` has it),
    None when the program could not be started. ``stdout``/``stderr`` are the last ``OUTPUT_TAIL_BYTES`` bytes of
    each, decoded as UTF-8 (bad bytes replaced), with a ``[... N bytes cut]`` line in front when longer.
    """

    argv: list[str]
    attempt: int
    exit_code: int | None
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class HookRunner(Protocol):
    """What runs a phase's hook commands (``run_hooks``; a unit test of the controller gives a fake)."""

    async def __call__(
        self, commands: Sequence[Sequence[str]], *, timeout_s: float, retries: int, env: Mapping[str, str] | None = None
    ) -> list[HookResult]: ...


def _tail(file: IO[bytes], limit: int = OUTPUT_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of an output file, with a line saying how much came before them."""
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - limit))
    body = file.read().decode("utf-8", errors="replace")
    return f"[... {size - limit} bytes cut]\n{body}" if size > limit else body


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


async def _attempt(argv: list[str], attempt: int, timeout_s: float, env: dict[str, str] | None) -> HookResult:
    started = time.monotonic()
    # Output goes to unlinked temporary files, not pipes: asyncio's wait() also waits for the pipes to close,
    # so a process the hook left behind holding its stdout would hold the controller until the timeout.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,  # its own process group, killed as a whole
                preexec_fn=die_with_parent,
            )
        except OSError as exc:
            why = f"cannot run {argv[0]!r}: {exc.strerror or exc}"
            return HookResult(list(argv), attempt, None, False, time.monotonic() - started, "", why)
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                timed_out = True
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
                except TimeoutError:
                    pass
        finally:
            # Also on cancellation (the controller stopping): nothing of the hook's group is left behind.
            _signal_group(proc.pid, signal.SIGKILL)
            if proc.returncode is None:
                await asyncio.shield(proc.wait())
        duration = time.monotonic() - started
        return HookResult(list(argv), attempt, proc.returncode, timed_out, duration, _tail(out), _tail(err))


async def run_hook(
    argv: Sequence[str],
    *,
    timeout_s: float,
    retries: int = 0,
    retry_delay_s: float = 1.0,
    env: Mapping[str, str] | None = None,
) -> list[HookResult]:
    """Run one command, trying up to ``1 + retries`` times; one result per attempt, stopping at the first success.

    ``env`` replaces the inherited environment when given (e.g. the controller's without its admin token).
    """
    if not argv or not argv[0]:
        raise ValueError("a hook is a non-empty argument list whose first item is the program")
    if timeout_s <= 0 or retries < 0 or retry_delay_s < 0:
        raise ValueError(f"timeout_s must be > 0, retries and retry_delay_s >= 0 (got {timeout_s}, {retries}, {retry_delay_s})")
    command = [str(a) for a in argv]
    environment = dict(env) if env is not None else None
    results: list[HookResult] = []
    for attempt in range(1, retries + 2):
        if attempt > 1:
            await asyncio.sleep(retry_delay_s)
        result = await _attempt(command, attempt, timeout_s, environment)
        results.append(result)
        if result.ok or (result.exit_code is None and not result.timed_out):
            break  # success, or a program that could not start (retrying changes nothing)
    return results


async def run_hooks(
    commands: Sequence[Sequence[str]],
    *,
    timeout_s: float,
    retries: int,
    retry_delay_s: float = 1.0,
    keep_going: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[HookResult]:
    """Run the commands in order, each with ``run_hook``; the results of every attempt, in order.

    Stops after the first command whose last attempt failed, unless ``keep_going``; the commands after it
    were not run (no results for them): the caller reports them as skipped.
    """
    results: list[HookResult] = []
    for argv in commands:
        attempts = await run_hook(argv, timeout_s=timeout_s, retries=retries, retry_delay_s=retry_delay_s, env=env)
        results.extend(attempts)
        if not attempts[-1].ok and not keep_going:
            break
    return results
