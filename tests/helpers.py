"""Helpers shared by tests."""

import signal


def sigint_default() -> None:
    """preexec_fn for children that a test interrupts with SIGINT.

    A CI runner started in the background ignores SIGINT and its children
    inherit that; restored to the default before exec, Python installs its
    own handler and Ctrl-C behaves as it does in a terminal.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process, from /proc; None when it is gone."""
    from pathlib import Path

    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, their children...)."""
    from pathlib import Path

    parents: dict[int, int] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and (st := _stat(int(p.name))) is not None:
            parents[int(p.name)] = st[1]
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {c for c, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def wait_gone(pids: set[int], timeout_s: float = 30.0) -> set[int]:
    """Wait for the processes to end; return those still alive at the deadline."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return set()
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def no_traceback(*texts: str) -> bool:
    return not any("Traceback (most recent call last)" in t for t in texts)
