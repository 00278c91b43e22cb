"""The canary state file: round trips, refusing foreign or busy files, a reader's snapshot, and the JSONL event log
completed from SQLite after a crash (the crash of a real child process: tests/system/test_canary_store_processes.py)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from specguard.canary.spec.rollout import Rollout
from specguard.canary.spec.vocabulary import PoolName
from specguard.canary.state import event_mirror
from specguard.canary.state.records import CanaryEvent, ControllerState, ProxiedRequest
from specguard.canary.state.store import STATE_SCHEMA_VERSION, CanaryStateError, CanaryStore, StoreMeta
from specguard.errors import ExitCode, OutputWriteError

SRC = Path(__file__).resolve().parents[3] / "src"


def rollout(name: str = "r1", control: bool = False) -> dict[str, Any]:
    pools: dict[str, Any] = {"baseline": {"servers": ["http://a:1"]}, "candidate": {"servers": ["http://b:1"]}}
    if control:
        pools["control"] = {"servers": ["http://c:1"]}
    return Rollout.model_validate({"name": name, "pools": pools, "admin": {"token_env": "T"}}).model_dump(mode="json")


def meta(name: str = "r1", created: float = 1_700_000_000.0, control: bool = False) -> StoreMeta:
    return StoreMeta(rollout_name=name, rollout=rollout(name, control), created_unix=created)


def state(step: int = 0, percent: float = 1.0, updated: float = 1_700_000_010.0) -> ControllerState:
    return ControllerState(step=step, percent=percent, step_started_unix=updated - 5, updated_unix=updated)


def request(seq: int, pool: PoolName, received: float, *, attempt: int = 1, retried: bool = False) -> ProxiedRequest:
    return ProxiedRequest(
        seq=seq,
        request_id=f"req-{seq}",
        attempt=attempt,
        retried=retried,
        received_unix=received,
        pool=pool,
        server="http://a:1",
        step=0,
        candidate_weight=0.05,
        segment="default",
        api="chat",
        stream=True,
        in_flight=0,
        ok=not retried,
        error="connect refused" if retried else None,
        http_status=None if retried else 200,
        ttft_s=None if retried else 0.1 + seq / 100,
        e2e_s=None if retried else 1.0 + seq / 100,
        stream_end_s=None if retried else 1.01 + seq / 100,
        chunk_times_s=[] if retried else [0.1 + seq / 100, 1.0 + seq / 100],
        chunk_tokens=[] if retried else [1, 7],
        token_source=None if retried else "server_usage",
        prompt_tokens=None if retried else 12,
        output_tokens=None if retried else 8,
        finish_reason=None if retried else "stop",
    )


def jsonl_events(store: CanaryStore) -> list[CanaryEvent]:
    return [CanaryEvent.model_validate_json(line) for line in store.events_path.read_text().splitlines()]


def add_events(store: CanaryStore, n: int) -> list[CanaryEvent]:
    return [
        store.append_event("window", time=1_700_000_100.0 + i, step=0, percent=1.0, details={"look": i, "p": 0.5 / (i + 1)})
        for i in range(n)
    ]


# ---- round trips ---------------------------------------------------------------------------------------


def test_everything_written_reads_back_from_another_open(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.sqlite"  # the directory is created
    with CanaryStore.create_or_open(path, meta()) as store:
        assert store.load_state() is None
        store.save_state(state(step=0))
        store.save_state(state(step=1, percent=5.0))
        written = add_events(store, 3)
        store.append_requests([request(0, "baseline", 10.0), request(1, "candidate", 11.0)])
        store.save_inventory("candidate", {"vllm": "0.9.1", "flags": ["--speculative-config", "{}"]})
    with CanaryStore.open_existing(path) as reader:
        assert reader.meta() == meta()
        assert reader.load_state() == state(step=1, percent=5.0)
        assert reader.events() == written
        assert [e.seq for e in written] == [0, 1, 2]
        assert [r.request_id for r in reader.requests()] == ["req-0", "req-1"]
        assert reader.requests()[1] == request(1, "candidate", 11.0)
        assert reader.inventories() == {"candidate": {"vllm": "0.9.1", "flags": ["--speculative-config", "{}"]}}
        assert jsonl_events(reader) == written
    assert reader.events_path == path.with_name("state.sqlite.events.jsonl")


def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    CanaryStore.create_or_open(path, meta()).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_reopening_keeps_the_original_meta_and_refuses_another_rollout(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    CanaryStore.create_or_open(path, meta(created=1.0)).close()
    with CanaryStore.create_or_open(path, meta(created=2.0)) as again:
        assert again.meta().created_unix == 1.0
    with pytest.raises(CanaryStateError, match="'r1', not 'other'") as info:
        CanaryStore.create_or_open(path, meta("other"))
    assert str(path) in str(info.value) and info.value.exit_code == ExitCode.USAGE


def test_events_filter_by_kind_and_seq(tmp_path: Path) -> None:
    with CanaryStore.create_or_open(tmp_path / "s.sqlite", meta()) as store:
        store.append_event("started", time=1.0, step=0, percent=1.0, details={"resumed": False})
        add_events(store, 2)
        store.append_event("decision", time=5.0, step=0, percent=5.0, decision="advance", reasons=["enough evidence"])
        assert [e.kind for e in store.events(kinds={"decision", "started"})] == ["started", "decision"]
        assert [e.seq for e in store.events(since_seq=2)] == [2, 3]
        assert store.events(kinds=[]) == []
        assert store.events(kinds=["window"], since_seq=2)[0].details["look"] == 1


def test_requests_filter_by_window_and_pool_and_count_client_requests(tmp_path: Path) -> None:
    with CanaryStore.create_or_open(tmp_path / "s.sqlite", meta()) as store:
        store.append_requests(
            [
                request(0, "candidate", 100.0, attempt=1, retried=True),  # failed before the first byte...
                request(0, "baseline", 100.0, attempt=2),  # ...and went to the baseline
                request(1, "baseline", 101.0),
                request(2, "candidate", 102.0),
            ]
        )
        store.append_requests([])
        window = store.requests(since_unix=100.0, until_unix=102.0)
        assert [(r.seq, r.attempt) for r in window] == [(0, 1), (0, 2), (1, 1)]  # until is exclusive
        assert [r.seq for r in store.requests(pool="candidate")] == [0, 2]
        assert [r.seq for r in store.requests(since_unix=101.0, pool="baseline")] == [1]
        assert store.request_counts() == {"baseline": 2, "candidate": 1}
    with CanaryStore.create_or_open(tmp_path / "c.sqlite", meta(control=True)) as with_control:
        assert with_control.request_counts() == {"baseline": 0, "candidate": 0, "control": 0}


def test_the_latest_inventory_per_pool_wins(tmp_path: Path) -> None:
    with CanaryStore.create_or_open(tmp_path / "s.sqlite", meta()) as store:
        store.save_inventory("baseline", {"v": 1})
        store.save_inventory("candidate", {"v": 1})
        store.save_inventory("baseline", {"v": 2})
        assert store.inventories() == {"baseline": {"v": 2}, "candidate": {"v": 1}}


def test_writes_from_a_worker_thread(tmp_path: Path) -> None:
    with CanaryStore.create_or_open(tmp_path / "s.sqlite", meta()) as store:
        event = asyncio.run(asyncio.to_thread(store.append_event, "stopped", time=9.0, step=0, percent=0.0))
        assert store.events() == [event]


# ---- one transaction, append only -------------------------------------------------------------------------


def test_commit_decision_saves_state_and_event_together_or_not_at_all(tmp_path: Path) -> None:
    with CanaryStore.create_or_open(tmp_path / "s.sqlite", meta()) as store:
        store.save_state(state(step=0))
        event = store.commit_decision(state(step=1, percent=5.0), time=3.0, step=1, percent=5.0, decision="advance")
        assert (event.kind, event.decision) == ("decision", "advance")
        assert store.load_state() == state(step=1, percent=5.0) and store.events() == [event]
        with pytest.raises(ValidationError):  # the event is invalid: the state must not be saved either
            store.commit_decision(state(step=2, percent=10.0), time=4.0, step=2, percent=10.0, decision="jump")
        assert store.load_state() == state(step=1, percent=5.0) and store.events() == [event]
        assert jsonl_events(store) == [event]


def test_events_and_requests_cannot_be_changed_or_deleted(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with CanaryStore.create_or_open(path, meta()) as store:
        add_events(store, 1)
        store.append_requests([request(0, "baseline", 1.0)])
    conn = sqlite3.connect(path)
    for sql in ("UPDATE events SET kind = 'manual'", "DELETE FROM events", "DELETE FROM requests"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(sql)
    conn.close()


def test_a_read_only_store_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    CanaryStore.create_or_open(path, meta()).close()
    path.with_name(path.name + ".events.jsonl").unlink()
    with CanaryStore.open_existing(path) as reader:
        with pytest.raises(RuntimeError, match="read-only"):
            reader.append_event("manual", time=1.0, step=0, percent=0.0)
        assert reader.events() == []
    assert not reader.events_path.exists()


# ---- files that are not ours, or busy --------------------------------------------------------------------


def test_a_missing_file_or_a_directory_is_a_state_error(tmp_path: Path) -> None:
    for path, why in ((tmp_path / "nope.sqlite", "no canary state file"), (tmp_path, "not a file")):
        with pytest.raises(CanaryStateError, match=why) as info:
            CanaryStore.open_existing(path)
        assert str(path) in str(info.value) and info.value.exit_code == ExitCode.USAGE
    assert not (tmp_path / "nope.sqlite").exists()


def test_foreign_files_are_refused_and_left_alone(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database, just text that is long enough to be read as a header" * 20)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    for path in (text, other, empty):
        before = path.read_bytes()
        with pytest.raises(CanaryStateError, match="not a specguard canary state file"):
            CanaryStore.open_existing(path)
        if path is not empty:
            with pytest.raises(CanaryStateError, match="not a specguard canary state file"):
                CanaryStore.create_or_open(path, meta())
        assert path.read_bytes() == before


def test_a_state_file_from_a_newer_specguard_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    CanaryStore.create_or_open(path, meta()).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (json.dumps(STATE_SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(CanaryStateError, match="newer specguard"):
        CanaryStore.open_existing(path)


def test_a_malformed_state_row_names_table_and_key(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with CanaryStore.create_or_open(path, meta()) as store:
        store.save_state(state())
    conn = sqlite3.connect(path)
    conn.execute("UPDATE state SET json = json_set(json, '$.step', -1)")
    conn.commit()
    conn.close()
    with CanaryStore.open_existing(path) as reader, pytest.raises(CanaryStateError, match="table state: key 'step'"):
        reader.load_state()


def test_a_second_writer_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    first = CanaryStore.create_or_open(path, meta())
    with pytest.raises(CanaryStateError, match=f"in use by another specguard canary controller \\(pid {os.getpid()}\\)"):
        CanaryStore.create_or_open(path, meta())
    with pytest.raises(CanaryStateError, match="in use"):
        CanaryStore.open_existing(path, read_only=False)
    with CanaryStore.open_existing(path) as reader:  # readers are never refused
        assert reader.meta() == meta()
    first.close()
    CanaryStore.open_existing(path, read_only=False).close()


# ---- concurrent readers ------------------------------------------------------------------------------------


def test_the_writer_commits_while_a_reader_holds_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with CanaryStore.create_or_open(path, meta()) as store:
        add_events(store, 1)
        reader = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None)
        reader.execute("BEGIN")
        assert reader.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1
        add_events(store, 2)  # not blocked by the open read transaction
        assert reader.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1  # its snapshot
        reader.execute("COMMIT")
        assert reader.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 3
        reader.close()
        assert len(jsonl_events(store)) == 3


# ---- the JSONL mirror after a crash -------------------------------------------------------------------------


def test_a_torn_last_line_is_cut_and_rewritten_from_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with CanaryStore.create_or_open(path, meta()) as store:
        written = add_events(store, 3)
    data = store.events_path.read_bytes()
    store.events_path.write_bytes(data[: data.rfind(b"\n", 0, len(data) - 1) + 12])  # 11 bytes of the last line
    with CanaryStore.create_or_open(path, meta()) as again:
        assert again.mirror_recovered == 1
        assert jsonl_events(again) == written
    assert again.events_path.read_bytes() == data


def test_a_missing_jsonl_is_rebuilt_from_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with CanaryStore.create_or_open(path, meta()) as store:
        written = add_events(store, 2)
    store.events_path.unlink()
    with CanaryStore.create_or_open(path, meta()) as again:
        assert again.mirror_recovered == 2 and jsonl_events(again) == written


def test_a_jsonl_that_disagrees_with_sqlite_is_an_error_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with CanaryStore.create_or_open(path, meta()) as store:
        add_events(store, 2)
    lines = store.events_path.read_text().splitlines()
    edited = [lines[0], lines[1].replace('"window"', '"manual"')]
    extra = [*lines, lines[1].replace('"seq":1', '"seq":2')]
    for content, where in ((edited, ":2: differs from event seq 1"), (extra, ":3: event seq 2 is not in the SQLite")):
        store.events_path.write_text("\n".join(content) + "\n")
        with pytest.raises(CanaryStateError, match=where):
            CanaryStore.create_or_open(path, meta())
        assert store.events_path.read_text().splitlines() == content


def test_a_failed_jsonl_write_is_reported_and_completed_by_the_next_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class DiskFullOnce:
        """The os module as event_mirror sees it, with one write that fails part-way (fault injection)."""

        failed = False

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def write(self, fd: int, data: Any) -> int:
            if not self.failed:
                self.failed = True
                os.write(fd, bytes(data[:9]))  # part of the line made it, then the disk was full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return os.write(fd, data)

    with CanaryStore.create_or_open(tmp_path / "s.sqlite", meta()) as store:
        first = add_events(store, 1)
        monkeypatch.setattr(event_mirror, "os", DiskFullOnce())
        with pytest.raises(OutputWriteError, match="event 1 is committed"):
            store.append_event("manual", time=2.0, step=0, percent=1.0, decision="pause")
        third = store.append_event("manual", time=3.0, step=0, percent=1.0, decision="resume")
        monkeypatch.undo()
        assert [e.decision for e in store.events()] == [None, "pause", "resume"]
        assert jsonl_events(store) == store.events() and store.events()[-1] == third and first == store.events()[:1]


def test_nan_in_details_is_stored_as_null_and_returned_as_stored(tmp_path: Path) -> None:
    with CanaryStore.create_or_open(tmp_path / "s.sqlite", meta()) as store:
        event = store.append_event("window", time=1.0, step=0, percent=1.0, details={"p_value": float("nan")})
        assert event.details == {"p_value": None} and store.events() == [event] == jsonl_events(store)
        with pytest.raises(ValidationError):  # a NaN where the format needs a number is refused before the commit
            store.append_event("window", time=2.0, step=0, percent=float("nan"))
        assert store.events() == [event]
