"""The JSONL copy of the canary's event log, kept beside the SQLite state file for people and for ``jq``.

SQLite is the truth; this file follows it. The store commits an event to SQLite first and only then writes its
line here, so a crash can leave this file short by the last events or with a torn last line, never ahead. On
the next writable open the store compares the lines with SQLite's rows, cuts a torn tail and appends what is
missing. A line that disagrees with SQLite (someone edited the file, or a different state file's log) is an
error, never silently rewritten: nothing in the event log is overwritten.

Written with ``os.write`` on an ``O_APPEND`` descriptor rather than through ``results.store.JsonlAppender``: an
unbuffered write leaves nothing half-flushed in a Python buffer after a failure (disk full), so the same process
can cut the file back to its last whole line and carry on.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EventMirror", "MirrorMismatch", "read_mirror_lines"]


class MirrorMismatch(Exception):
    """The JSONL mirror holds a line that SQLite does not (line number, reason)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class _Scan:
    lines: list[str]  # whole lines, without their newline
    good_size: int  # bytes up to the end of the last whole line


def read_mirror_lines(path: Path) -> list[str]:
    """The whole lines of a mirror file (a torn last line left out); [] when there is no file."""
    return _scan(path).lines


def _scan(path: Path) -> _Scan:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return _Scan([], 0)
    end = data.rfind(b"\n") + 1  # 0 when there is no whole line
    text = data[:end].decode("utf-8", errors="replace")
    return _Scan(text.split("\n")[:-1] if end else [], end)


class EventMirror:
    """The open JSONL file: one fsynced line per event, appended in ``seq`` order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.next_seq = 0  # the seq of the next line this file needs
        self.dirty = True  # not yet compared with SQLite, or a write failed part-way

    def reconcile(self, truth: Sequence[str]) -> int:
        """Make the file hold exactly ``truth`` (SQLite's event lines, in seq order); return how many lines were added.

        Raises MirrorMismatch when a whole line of the file differs from SQLite's or has no row there.
        """
        scan = _scan(self.path)
        for i, line in enumerate(scan.lines):
            if i >= len(truth):
                raise MirrorMismatch(i + 1, f"event seq {i} is not in the SQLite state file (which has {len(truth)})")
            if line != truth[i]:
                raise MirrorMismatch(i + 1, f"differs from event seq {i} in the SQLite state file")
        os.ftruncate(self._fd, scan.good_size)  # a torn last line: the crash came mid-write
        self.next_seq = len(scan.lines)
        self._write(truth[self.next_seq :])
        self.dirty = False
        return len(truth) - len(scan.lines)

    def append(self, lines: Sequence[str]) -> None:
        """Append the lines for seq ``next_seq`` onwards. On OSError the file is marked dirty for ``reconcile``."""
        if self.dirty:
            raise RuntimeError("reconcile the mirror with SQLite before appending")
        self._write(lines)

    def _write(self, lines: Sequence[str]) -> None:
        if not lines:
            return
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError:
            self.dirty = True
            raise
        self.next_seq += len(lines)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
