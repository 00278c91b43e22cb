"""Hooks: real child processes, exec'd without a shell, in their own process group, killed with it on timeout."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from specguard.canary.control import hooks
from specguard.canary.control.hooks import OUTPUT_TAIL_BYTES, HookResult, run_hook, run_hooks

PY = [sys.executable, "-I", "-c"]


def py(code: str, *args: str) -> list[str]:
    return [*PY, code, *args]


async def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie waiting for init); polls, as death after SIGKILL is asynchronous."""
    for _ in range(200):  # a guard against a hang, not a timing threshold
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            return True
        if fields[0] in {"Z", "X"}:
            return True
        await asyncio.sleep(0.05)
    return False


async def wait_for_file(path: Path) -> str:
    for _ in range(400):
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never written")


async def test_a_successful_command_has_one_ok_result_with_its_output() -> None:
    [result] = await run_hook(py("print('rolled back'); import sys; print('note', file=sys.stderr)"), timeout_s=60)
    assert result.ok and result.exit_code == 0 and not result.timed_out and result.attempt == 1
    assert (result.stdout, result.stderr) == ("rolled back\n", "note\n")
    assert result.argv[:2] == PY[:2] and result.duration_s > 0


async def test_shell_metacharacters_reach_the_program_literally(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    args = ["; rm -rf x && echo $HOME |", f"$(touch {marker})", f"`touch {marker}`", "*", "a b", "'\"", "> out"]
    [result] = await run_hook(py("import sys, json; print(json.dumps(sys.argv[1:]))", *args), timeout_s=60)
    assert result.ok and json.loads(result.stdout) == args
    assert not marker.exists()


async def test_a_nonzero_exit_is_a_failed_result_with_its_stderr() -> None:
    [result] = await run_hook(py("import sys; print('unit not found', file=sys.stderr); sys.exit(5)"), timeout_s=60)
    assert not result.ok and result.exit_code == 5 and not result.timed_out
    assert result.stderr == "unit not found\n"


async def test_a_missing_program_is_a_failed_result_not_an_exception_and_is_not_retried(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    [result] = await run_hook([missing, "--now"], timeout_s=60, retries=3, retry_delay_s=0)
    assert not result.ok and result.exit_code is None and not result.timed_out
    assert missing in result.stderr and "No such file" in result.stderr


async def test_retries_stop_at_the_first_success(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    # Fails on its first two runs, succeeds on the third.
    code = "import sys, pathlib; p = pathlib.Path(sys.argv[1]); n = int(p.read_text() or 0) + 1 if p.exists() else 1"
    code += "; p.write_text(str(n)); sys.exit(0 if n >= 3 else 1)"
    results = await run_hook(py(code, str(counter)), timeout_s=60, retries=5, retry_delay_s=0)
    assert [(r.attempt, r.ok) for r in results] == [(1, False), (2, False), (3, True)]
    assert counter.read_text() == "3"


async def test_a_command_that_keeps_failing_is_tried_one_plus_retries_times() -> None:
    results = await run_hook(py("raise SystemExit(2)"), timeout_s=60, retries=2, retry_delay_s=0)
    assert [(r.attempt, r.exit_code) for r in results] == [(1, 2), (2, 2), (3, 2)]


async def test_a_timeout_kills_the_whole_group_even_a_child_that_ignores_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hooks, "KILL_GRACE_S", 0.5)
    pid_file = tmp_path / "child.pid"
    # The hook starts a child that ignores SIGTERM (it would survive a kill of the hook alone), then waits.
    hook = ["sh", "-c", f'(trap "" TERM; exec sleep 300) & echo $! > {pid_file}; echo started; wait']
    [result] = await run_hook(hook, timeout_s=1.0)
    assert result.timed_out and not result.ok and result.exit_code is not None and result.exit_code < 0
    assert result.stdout == "started\n"
    assert await gone(int(pid_file.read_text()))


async def test_a_child_left_behind_by_a_finished_hook_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    [result] = await run_hook(["sh", "-c", f"sleep 300 & echo $! > {pid_file}"], timeout_s=60)
    assert result.ok  # the hook's own status; its leftover holds the pipes open but does not make us wait
    assert await gone(int(pid_file.read_text()))


async def test_a_cancelled_hook_takes_its_group_down(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    task = asyncio.create_task(run_hook(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], timeout_s=600))
    pid = int(await wait_for_file(pid_file))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(pid)


async def test_a_hook_has_its_own_process_group_and_no_stdin() -> None:
    code = "import os, sys; print(os.getpgid(0) == os.getpid() != os.getpgid(os.getppid()), repr(sys.stdin.read()))"
    [result] = await run_hook(py(code), timeout_s=60)
    assert result.stdout == "True ''\n"


async def test_env_replaces_the_environment_when_given() -> None:
    code = "import os; print(sorted(k for k in os.environ if k in ('ONLY', 'HOME')))"
    [result] = await run_hook(py(code), timeout_s=60, env={"ONLY": "1"})
    assert result.stdout == "['ONLY']\n"


async def test_long_output_keeps_its_tail() -> None:
    total = 3 * OUTPUT_TAIL_BYTES
    [result] = await run_hook(py(f"import sys; sys.stdout.write(''.join(str(i % 10) for i in range({total})))"), timeout_s=60)
    expected_tail = "".join(str(i % 10) for i in range(total))[-OUTPUT_TAIL_BYTES:]
    assert result.stdout == f"[... {total - OUTPUT_TAIL_BYTES} bytes cut]\n{expected_tail}"


def ran(results: list[HookResult]) -> list[str]:
    return [r.argv[-1] for r in results]


async def test_run_hooks_stops_at_the_first_command_that_still_fails(tmp_path: Path) -> None:
    commands = [py("pass", "stop"), py("raise SystemExit(1)", "start"), py("pass", "notify")]
    results = await run_hooks(commands, timeout_s=60, retries=1, retry_delay_s=0)
    assert ran(results) == ["stop", "start", "start"]  # start was retried once, notify never ran
    kept_going = await run_hooks(commands, timeout_s=60, retries=0, keep_going=True)
    assert ran(kept_going) == ["stop", "start", "notify"] and [r.ok for r in kept_going] == [True, False, True]


async def test_an_empty_command_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty argument list"):
        await run_hook([], timeout_s=1)
    assert await run_hooks([], timeout_s=1, retries=0) == []
