"""The canary state file across processes: a reader in another process while a writer holds a transaction, and
the JSONL event log completed from SQLite after a real child process is killed between the two writes.

The system tier (it starts Python child processes); the state file's in-process behaviour is in
tests/unit/canary/test_store.py, whose builders these tests share.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from specguard.canary.state.store import CanaryStore
from tests.unit.canary.test_store import jsonl_events, meta, state

SRC = Path(__file__).resolve().parents[2] / "src"


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    # The timeout only keeps a broken test from hanging the suite; nothing is timed.
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120)


READ_IN_CHILD = """
    import json, sys
    from pathlib import Path
    from specguard.canary.state.store import CanaryStore
    with CanaryStore.open_existing(Path(sys.argv[1])) as s:
        state = s.load_state()
        print(json.dumps({"events": [e.seq for e in s.events()], "step": state.step if state else None}))
"""


def test_another_process_reads_while_a_writer_holds_a_transaction(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with CanaryStore.create_or_open(path, meta()) as store:
        store.commit_decision(state(step=1), time=1.0, step=1, percent=5.0, decision="advance")
        # A second writer connection in the middle of a transaction: a new event and state, not yet committed.
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO events (seq, time, kind, json) VALUES (1, 2.0, 'manual', '{}')")
        writer.execute("UPDATE state SET json = json_set(json, '$.step', 2)")
        code = READ_IN_CHILD.replace("sys.argv[1]", repr(str(path)))
        child = run_child(code)
        assert child.returncode == 0, child.stderr
        assert json.loads(child.stdout) == {"events": [0], "step": 1}  # the last committed state, without waiting
        writer.execute("ROLLBACK")
        writer.close()


DIE_BETWEEN_COMMIT_AND_JSONL = """
    import os, sys
    from pathlib import Path
    from specguard.canary.state import event_mirror
    from specguard.canary.state.store import CanaryStore, StoreMeta
    meta = StoreMeta(rollout_name="r1", rollout={}, created_unix=1.0)
    store = CanaryStore.create_or_open(Path(sys.argv[1]), meta)
    store.append_event("started", time=1.0, step=0, percent=1.0)
    # Fault injection: the process dies after SQLite committed the next event, before its JSONL line.
    event_mirror.EventMirror.append = lambda self, lines: os._exit(17)
    store.commit_decision(
        __import__("specguard.canary.state.records", fromlist=["x"]).ControllerState(
            step=0, percent=0.0, status="rolled_back", step_started_unix=1.0, updated_unix=2.0),
        time=2.0, step=0, percent=0.0, decision="rollback")
"""


def test_a_process_killed_between_the_commit_and_the_jsonl_line_is_completed_on_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    child = run_child(DIE_BETWEEN_COMMIT_AND_JSONL.replace("sys.argv[1]", repr(str(path))))
    assert child.returncode == 17, child.stderr
    with CanaryStore.open_existing(path) as reader:  # reading changes nothing
        assert [e.decision for e in reader.events()] == [None, "rollback"]
        assert len(reader.events_path.read_text().splitlines()) == 1
        state_after = reader.load_state()
        assert state_after is not None and state_after.status == "rolled_back"  # the decision and its state agree
    with CanaryStore.open_existing(path, read_only=False) as store:
        assert store.mirror_recovered == 1
        assert jsonl_events(store) == store.events()
        nxt = store.append_event("stopped", time=3.0, step=0, percent=0.0)
        assert nxt.seq == 2 and jsonl_events(store) == store.events()
