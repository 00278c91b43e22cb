"""The canary's state file: the one owner of its SQLite layout (controller state, event log, requests, inventories).

``specguard canary run`` writes it; ``canary status``, ``report`` and ``events`` read it, possibly from another
process while the controller is writing. Hence:

* WAL journal: readers see the last committed transaction and neither block the writer nor wait for it.
* ``synchronous=FULL``: each commit is on disk before it returns (about 0.27 ms per commit against 0.03 ms
  for NORMAL, measured on this ext4 disk). NORMAL keeps the file consistent but may lose the last commits
  to a power cut, and the event log's rules need more: the JSONL mirror (fsynced per line) is written after
  the SQLite commit and must never be ahead of it, and a rollback decision must not vanish after its hook
  has run. The controller commits a few times per window, so the cost is nothing.
* One writer: a writable open takes an exclusive ``flock`` on ``<state>.lock`` (released when the process
  ends, however it ends), so a second controller on the same file is refused rather than interleaving
  decisions. The lock file is left in place: removing it would let two processes lock different inodes.
* Append-only: triggers refuse UPDATE and DELETE on events and requests; inventories are appended too (the
  latest per pool wins). Only the controller state, one row, is replaced.
* The event log is mirrored as JSONL at ``<state>.events.jsonl`` (``event_mirror.py``): SQLite is the truth,
  and a writable open completes the mirror from it after a crash.

Rows keep each record as its JSON text (the ``records.py`` models), plus the columns that queries filter on.
One connection per store, shared across threads behind a lock (the controller may write from a worker thread).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from pydantic import ValidationError

from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state.event_mirror import EventMirror, MirrorMismatch
from specguard.canary.state.records import CanaryEvent, ControllerState, EventKind, ProxiedRequest
from specguard.errors import InputFileError, OutputWriteError

__all__ = ["STATE_FORMAT", "STATE_SCHEMA_VERSION", "CanaryStateError", "CanaryStore", "StoreMeta"]

STATE_FORMAT = "specguard.canary_state"
STATE_SCHEMA_VERSION = 1
_BUSY_TIMEOUT_MS = 10_000  # a checkpoint or a reader's WAL recovery holds a lock for milliseconds, not seconds

_SCHEMA: tuple[str, ...] = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE state (id INTEGER PRIMARY KEY CHECK (id = 1), updated_unix REAL NOT NULL, json TEXT NOT NULL)",
    "CREATE TABLE events (seq INTEGER PRIMARY KEY, time REAL NOT NULL, kind TEXT NOT NULL, json TEXT NOT NULL)",
    "CREATE INDEX events_kind ON events (kind, seq)",
    "CREATE TABLE requests (id INTEGER PRIMARY KEY, received_unix REAL NOT NULL, pool TEXT NOT NULL,"
    " retried INTEGER NOT NULL, seq INTEGER NOT NULL, attempt INTEGER NOT NULL, request_id TEXT NOT NULL,"
    " json TEXT NOT NULL)",
    "CREATE INDEX requests_time ON requests (received_unix)",
    "CREATE INDEX requests_pool_time ON requests (pool, received_unix)",
    "CREATE TABLE inventories (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, json TEXT NOT NULL)",
    *(
        f"CREATE TRIGGER {table}_append_only_{op.lower()} BEFORE {op} ON {table}"
        f" BEGIN SELECT RAISE(ABORT, '{table} are append-only'); END"
        for table in ("events", "requests", "inventories")
        for op in ("UPDATE", "DELETE")
    ),
)


class CanaryStateError(InputFileError):
    """A state file that is missing, unreadable, not a specguard canary state, or in use; the message names the path."""


@dataclass(frozen=True)
class StoreMeta:
    """What a state file was started with; fixed at creation."""

    rollout_name: str
    rollout: dict[str, Any]  # Rollout.stored()
    created_unix: float


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _take_lock(path: Path) -> int:
    lock = _lock_path(path)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise OutputWriteError(f"{lock}: cannot create the state file's lock: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        holder = os.read(fd, 32).decode("ascii", errors="replace").strip() or "unknown"
        os.close(fd)
        raise CanaryStateError(
            f"{path}: in use by another specguard canary controller (pid {holder}); "
            "stop it first, or give this rollout its own state.path"
        ) from exc
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode("ascii"))
    return fd


def _connect(path: Path, *, read_only: bool) -> sqlite3.Connection:
    uri = path.absolute().as_uri() + ("?mode=ro" if read_only else "?mode=rwc")
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise CanaryStateError(f"{path}: cannot open the canary state file: {exc}") from exc
    conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    return conn


def _foreign(path: Path, why: str) -> CanaryStateError:
    return CanaryStateError(f"{path}: not a specguard canary state file ({why})")


def _read_meta(conn: sqlite3.Connection, path: Path) -> StoreMeta | None:
    """The file's meta, None for an empty database; CanaryStateError for anything that is not ours."""
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return None
        if "meta" not in tables:
            raise _foreign(path, f"tables {', '.join(sorted(tables))}, no 'meta'")
        raw = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise _foreign(path, str(exc)) from exc
    try:
        values = {str(k): json.loads(v) for k, v in raw.items()}
    except (TypeError, ValueError) as exc:
        raise _foreign(path, f"table meta: {exc}") from exc
    if values.get("format") != STATE_FORMAT:
        raise _foreign(path, f"table meta: key 'format' is {values.get('format')!r}, expected {STATE_FORMAT!r}")
    version = values.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise CanaryStateError(f"{path}: table meta: key 'schema_version' is {version!r}, expected a positive integer")
    if version > STATE_SCHEMA_VERSION:
        raise CanaryStateError(
            f"{path}: written by a newer specguard (state schema {version}); this one reads schema {STATE_SCHEMA_VERSION}"
        )
    name, rollout, created = values.get("rollout_name"), values.get("rollout"), values.get("created_unix")
    for key, value, kind in (("rollout_name", name, str), ("rollout", rollout, dict), ("created_unix", created, float)):
        if not isinstance(value, kind) and not (kind is float and isinstance(value, int)):
            raise CanaryStateError(f"{path}: table meta: key '{key}' is {value!r}, expected {kind.__name__}")
    return StoreMeta(
        rollout_name=cast(str, name), rollout=cast(dict[str, Any], rollout), created_unix=float(cast(float, created))
    )


def _initialise(conn: sqlite3.Connection, meta: StoreMeta) -> None:
    values = {
        "format": STATE_FORMAT,
        "schema_version": STATE_SCHEMA_VERSION,
        "rollout_name": meta.rollout_name,
        "rollout": meta.rollout,
        "created_unix": meta.created_unix,
    }
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [(k, json.dumps(v)) for k, v in values.items()])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _create_whole(path: Path, meta: StoreMeta) -> None:
    """Write a new state file under a temporary name and link it into place, so that it appears complete.

    Created in place, the file exists for a moment before its tables do: a ``canary status`` (or a test
    waiting for the start) that opened it then read an empty database and called it foreign (seen in CI).
    ``os.link`` refuses an existing target, so of two controllers started together one creates the file and
    the other opens it (and then finds the lock taken).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            _initialise(conn, meta)
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    except (sqlite3.Error, OSError) as exc:
        raise OutputWriteError(f"{path}: cannot create the canary state: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def _writer_pragmas(conn: sqlite3.Connection, path: Path) -> None:
    mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
    if mode != "wal":
        raise OutputWriteError(
            f"{path}: SQLite could not use its WAL journal here (journal mode {mode}); "
            "put the state file on a local disk (WAL needs shared memory, which network file systems lack)"
        )
    conn.execute("PRAGMA synchronous = FULL")


class CanaryStore:
    """An open state file. Build it with ``create_or_open`` (the controller) or ``open_existing`` (readers)."""

    def __init__(self, path: Path, conn: sqlite3.Connection, meta: StoreMeta, *, read_only: bool, lock_fd: int | None) -> None:
        self.path = path
        self.events_path = path.with_name(path.name + ".events.jsonl")
        self.read_only = read_only
        self.mirror_recovered = 0  # event lines the last writable open added to the JSONL from SQLite
        self._conn = conn
        self._meta = meta
        self._lock_fd = lock_fd
        self._mutex = threading.RLock()
        self._mirror: EventMirror | None = None
        # Told of every event once it is durable: the admin API's controller series (control.series) count them.
        self.on_event: Callable[[CanaryEvent], None] | None = None
        if not read_only:
            try:
                self._mirror = EventMirror(self.events_path)
            except OSError as exc:
                raise OutputWriteError(f"{self.events_path}: cannot open the event log: {exc.strerror}") from exc
            try:
                self.mirror_recovered = self._reconcile_mirror()
            except BaseException:
                self._mirror.close()
                raise

    # -- opening and closing

    @classmethod
    def create_or_open(cls, path: Path, meta: StoreMeta) -> CanaryStore:
        """For ``canary run``: create the file (and its directory), or open the one this rollout started."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputWriteError(f"{path.parent}: cannot create the state directory: {exc.strerror}") from exc
        if not path.exists():
            _create_whole(path, meta)
        return cls._open(path, meta, read_only=False)

    @classmethod
    def open_existing(cls, path: Path, *, read_only: bool = True) -> CanaryStore:
        """For ``status``, ``report`` and ``events``: a file that ``canary run`` created."""
        if not path.exists():
            raise CanaryStateError(f"{path}: no canary state file here (it is created by 'specguard canary run')")
        if not path.is_file():
            raise CanaryStateError(f"{path}: not a file; expected the SQLite state file of 'specguard canary run'")
        return cls._open(path, None, read_only=read_only)

    @classmethod
    def _open(cls, path: Path, meta: StoreMeta | None, *, read_only: bool) -> CanaryStore:
        lock_fd = None if read_only else _take_lock(path)
        conn: sqlite3.Connection | None = None
        try:
            conn = _connect(path, read_only=read_only)
            stored = _read_meta(conn, path)
            if not read_only:
                try:
                    _writer_pragmas(conn, path)
                except sqlite3.DatabaseError as exc:
                    raise _foreign(path, str(exc)) from exc
            if stored is None:
                if meta is None:
                    raise _foreign(path, "an empty database")
                try:
                    _initialise(conn, meta)
                except sqlite3.Error as exc:
                    raise OutputWriteError(f"{path}: cannot create the canary state: {exc}") from exc
                stored = meta
            elif meta is not None and stored.rollout_name != meta.rollout_name:
                raise CanaryStateError(
                    f"{path}: holds the state of rollout {stored.rollout_name!r}, not {meta.rollout_name!r}; "
                    "give each rollout its own state.path"
                )
            return cls(path, conn, stored, read_only=read_only, lock_fd=lock_fd)
        except BaseException:
            if conn is not None:
                conn.close()
            if lock_fd is not None:
                os.close(lock_fd)
            raise

    def close(self) -> None:
        with self._mutex:
            self._conn.close()
            if self._mirror is not None:
                self._mirror.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    def __enter__(self) -> CanaryStore:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- transactions

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction, committed on success; SQLite's errors (disk full, I/O) as OutputWriteError."""
        if self.read_only:
            raise RuntimeError(f"{self.path}: this store was opened read-only")
        with self._mutex:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise OutputWriteError(f"{self.path}: cannot write the canary state: {exc}") from exc

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            try:
                yield self._conn
            except sqlite3.DatabaseError as exc:
                raise CanaryStateError(f"{self.path}: cannot read the canary state: {exc}") from exc

    def _invalid(self, table: str, exc: ValidationError) -> CanaryStateError:
        err = exc.errors()[0]
        key = ".".join(map(str, err["loc"])) or "(row)"
        return CanaryStateError(f"{self.path}: table {table}: key '{key}': {err['msg']}")

    # -- meta and controller state

    def meta(self) -> StoreMeta:
        return self._meta

    def load_state(self) -> ControllerState | None:
        with self._reading() as conn:
            row = conn.execute("SELECT json FROM state WHERE id = 1").fetchone()
        if row is None:
            return None
        try:
            return ControllerState.model_validate_json(row[0])
        except ValidationError as exc:
            raise self._invalid("state", exc) from exc

    def save_state(self, state: ControllerState) -> None:
        with self._writing() as conn:
            self._put_state(conn, state)

    @staticmethod
    def _put_state(conn: sqlite3.Connection, state: ControllerState) -> None:
        conn.execute(
            "INSERT INTO state (id, updated_unix, json) VALUES (1, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET updated_unix = excluded.updated_unix, json = excluded.json",
            (state.updated_unix, state.model_dump_json()),
        )

    # -- the event log

    def append_event(
        self,
        kind: EventKind,
        *,
        time: float,
        step: int,
        percent: float,
        decision: str | None = None,
        reasons: Sequence[str] = (),
        details: Mapping[str, Any] | None = None,
    ) -> CanaryEvent:
        """Append one event (its seq assigned here): a SQLite row, then its fsynced JSONL line."""
        with self._mutex:
            with self._writing() as conn:
                event, line = self._put_event(conn, kind, time, step, percent, decision, reasons, details)
            self._mirror_event(event, line)
        if self.on_event is not None:
            self.on_event(event)
        return event

    def commit_decision(
        self,
        state: ControllerState,
        kind: EventKind = "decision",
        *,
        time: float,
        step: int,
        percent: float,
        decision: str | None = None,
        reasons: Sequence[str] = (),
        details: Mapping[str, Any] | None = None,
    ) -> CanaryEvent:
        """Save the state and append its event in ONE transaction: after a crash both are there or neither is."""
        with self._mutex:
            with self._writing() as conn:
                self._put_state(conn, state)
                event, line = self._put_event(conn, kind, time, step, percent, decision, reasons, details)
            self._mirror_event(event, line)
        if self.on_event is not None:
            self.on_event(event)
        return event

    @staticmethod
    def _put_event(
        conn: sqlite3.Connection,
        kind: EventKind,
        time: float,
        step: int,
        percent: float,
        decision: str | None,
        reasons: Sequence[str],
        details: Mapping[str, Any] | None,
    ) -> tuple[CanaryEvent, str]:
        seq = int(conn.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM events").fetchone()[0])
        event = CanaryEvent.model_validate(
            {
                "seq": seq,
                "time": time,
                "kind": kind,
                "decision": decision,
                "step": step,
                "percent": percent,
                "reasons": list(reasons),
                "details": dict(details or {}),
            }
        )
        line = event.model_dump_json()
        conn.execute("INSERT INTO events (seq, time, kind, json) VALUES (?, ?, ?, ?)", (seq, time, kind, line))
        # What a reader of either log gets back (pydantic writes NaN and infinity as null).
        return CanaryEvent.model_validate_json(line), line

    def _event_lines(self) -> list[str]:
        with self._reading() as conn:
            rows = conn.execute("SELECT seq, json FROM events ORDER BY seq").fetchall()
        for i, (seq, _) in enumerate(rows):
            if seq != i:
                raise CanaryStateError(f"{self.path}: table events: seq {seq} where {i} was expected (a gap in the log)")
        return [str(line) for _, line in rows]

    def _reconcile_mirror(self) -> int:
        assert self._mirror is not None
        try:
            return self._mirror.reconcile(self._event_lines())
        except MirrorMismatch as exc:
            raise CanaryStateError(
                f"{self.events_path}:{exc.line}: {exc.reason}; the SQLite file {self.path} is the truth: "
                "move the JSONL file aside and it is rebuilt from SQLite on the next start"
            ) from exc
        except OSError as exc:
            raise OutputWriteError(f"{self.events_path}: cannot complete the event log: {exc.strerror}") from exc

    def _mirror_event(self, event: CanaryEvent, line: str) -> None:
        assert self._mirror is not None
        if self._mirror.dirty or self._mirror.next_seq != event.seq:
            self._reconcile_mirror()
            return
        try:
            self._mirror.append([line])
        except OSError as exc:
            raise OutputWriteError(
                f"{self.events_path}: event {event.seq} is committed in {self.path} but its JSONL line could not be "
                f"written ({exc.strerror}); it is written with the next event or on the next start"
            ) from exc

    def events(self, kinds: Collection[EventKind] | None = None, since_seq: int = 0) -> list[CanaryEvent]:
        """Events with ``seq >= since_seq`` (of the given kinds), in seq order, from SQLite."""
        sql = "SELECT json FROM events WHERE seq >= ?"
        args: list[Any] = [since_seq]
        if kinds is not None:
            if not kinds:
                return []
            sql += f" AND kind IN ({', '.join('?' * len(kinds))})"
            args.extend(kinds)
        with self._reading() as conn:
            rows = conn.execute(sql + " ORDER BY seq", args).fetchall()
        try:
            return [CanaryEvent.model_validate_json(row[0]) for row in rows]
        except ValidationError as exc:
            raise self._invalid("events", exc) from exc

    # -- requests

    def append_requests(self, records: Sequence[ProxiedRequest]) -> None:
        """Insert a batch of the proxy's records in one transaction (one fsync for the lot)."""
        if not records:
            return
        rows = [(r.received_unix, r.pool, int(r.retried), r.seq, r.attempt, r.request_id, r.model_dump_json()) for r in records]
        with self._writing() as conn:
            conn.executemany(
                "INSERT INTO requests (received_unix, pool, retried, seq, attempt, request_id, json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def requests(
        self, since_unix: float | None = None, until_unix: float | None = None, pool: PoolName | None = None
    ) -> list[ProxiedRequest]:
        """Records received in ``[since_unix, until_unix)`` (either end open when None), ordered by receipt."""
        clauses: list[str] = []
        args: list[Any] = []
        for clause, value in (("received_unix >= ?", since_unix), ("received_unix < ?", until_unix), ("pool = ?", pool)):
            if value is not None:
                clauses.append(clause)
                args.append(value)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._reading() as conn:
            rows = conn.execute(f"SELECT json FROM requests{where} ORDER BY received_unix, seq, attempt, id", args).fetchall()
        try:
            return [ProxiedRequest.model_validate_json(row[0]) for row in rows]
        except ValidationError as exc:
            raise self._invalid("requests", exc) from exc

    def request_counts(self) -> dict[PoolName, int]:
        """Client requests (records with ``retried`` false) per pool: baseline and candidate always, control if used."""
        counts: dict[PoolName, int] = {"baseline": 0, "candidate": 0}
        if (self._meta.rollout.get("pools") or {}).get("control") is not None:
            counts["control"] = 0
        with self._reading() as conn:
            rows = conn.execute("SELECT pool, COUNT(*) FROM requests WHERE retried = 0 GROUP BY pool").fetchall()
        for pool, n in rows:
            counts[cast(PoolName, pool)] = int(n)
        return counts

    # -- inventories

    def save_inventory(self, pool: str, inventory: Mapping[str, Any]) -> None:
        """Record a pool's inventory (appended; the latest per pool is the one ``inventories`` returns)."""
        text = json.dumps(dict(inventory), sort_keys=True)
        with self._writing() as conn:
            conn.execute("INSERT INTO inventories (pool, json) VALUES (?, ?)", (pool, text))

    def inventories(self) -> dict[str, dict[str, Any]]:
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT pool, json FROM inventories WHERE id IN (SELECT MAX(id) FROM inventories GROUP BY pool) ORDER BY pool"
            ).fetchall()
        try:
            return {str(pool): dict(json.loads(text)) for pool, text in rows}
        except (TypeError, ValueError) as exc:
            raise CanaryStateError(f"{self.path}: table inventories: {exc}") from exc
