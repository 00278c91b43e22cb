"""The README's tour runs as written: its bash blocks, in order, as one script against the embedded runtime.

The script runs under ``set -euo pipefail`` in a scratch directory holding a copy of ``examples/``, with this
checkout's ``.venv/bin`` first on PATH (what ``source .venv/bin/activate`` does), so any command exiting non-zero
fails the test unless the README itself says what exit to expect (``|| [ $? = 130 ]``). The files each step made
are then read back: the tour's promise is that every command uses what an earlier one made.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specguard.vllm.process import log_tail

ROOT = Path(__file__).resolve().parents[2]
TOUR_PORTS = (8000, 8001, 8080, 8081)  # the two servers, the canary's proxy and its admin API


def tour_script(readme: str) -> str:
    """The bash blocks of the README's ``## A tour`` section, joined in order."""
    section = readme.split("\n## A tour\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert blocks, "the README's tour has no bash block"
    return "".join(blocks)


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def tails(directory: Path) -> str:
    return "".join(f"\n--- {p.name}:\n{log_tail(p, 25)}" for p in sorted(directory.glob("*.log")))


@pytest.mark.vllm
def test_the_readme_tour_runs_in_order_as_one_script(runtime, models, tmp_path: Path) -> None:
    """Two embedded servers, bench on each, summary, compare, a curl-written request log assessed, sim from the
    n-gram run, the check plan's dry run sized from the baseline run, then a canary between two launched pools
    with traffic through its proxy, the operator's promotion and the report."""
    busy = [p for p in TOUR_PORTS if not port_is_free(p)]
    assert not busy, f"the tour's ports must be free for this test: {busy} in use"
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    script = "set -euo pipefail\nset -x\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + tour_script(
        (ROOT / "README.md").read_text()
    )
    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "specguard").exists(), f"{venv_bin}: the environment the tour activates has no specguard"
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv_bin.parent), "COLUMNS": "160"}
    env.pop("SPECGUARD_CANARY_TOKEN", None)  # the tour exports its own
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=1200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
        pytest.fail(f"the tour ran past 20 minutes:\n{stderr[-4000:]}{tails(work / 'runs')}")
    runs = work / "runs"
    assert proc.returncode == 0, f"exit {proc.returncode}; the last commands:\n{stderr[-5000:]}\n{stdout[-2000:]}{tails(runs)}"

    # bench wrote each run; the same workload on both servers, every request answered
    for name in ("baseline", "ngram", "through-canary"):
        summary = json.loads((runs / name / "summary.json").read_text())
        assert (summary["requests"], summary["errors"]) == (24, 0), (name, summary)
    assert "TTFT" in stdout and "ITL" in stdout  # summary and compare printed their tables

    # the request log is one JSON object per line, each with the response's token ids, and assess replayed them all
    lines = (runs / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 8
    assert all(json.loads(x)["response"]["choices"][0]["token_ids"] for x in lines)
    assert re.search(r"\b8 with responses\b", stdout), stdout[-4000:]
    assert "no responses to replay" not in stdout

    # the canary: every request through the proxy recorded once, the operator's promotion its last decision
    from specguard.canary.state.store import CanaryStore

    state = runs / "canary-embedded"
    with CanaryStore.open_existing(state / "state.sqlite") as store:
        counts = store.request_counts()
        events = store.events()
        status = store.load_state()
        inventories = store.inventories()
    decisions = [e for e in events if e.decision is not None]
    assert {"baseline", "candidate"} <= inventories.keys() and "window" in [e.kind for e in events]
    assert counts["baseline"] + counts["candidate"] == 24, counts
    assert decisions and decisions[-1].decision == "promote", [(e.kind, e.decision, e.reasons) for e in decisions[-3:]]
    assert status is not None and (status.status, status.percent) == ("promoted", 100.0)
    assert list((state / "report").glob("*.html")), sorted(p.name for p in (state / "report").iterdir())

    # nothing the tour started outlives it
    assert all(port_is_free(p) for p in TOUR_PORTS), [p for p in TOUR_PORTS if not port_is_free(p)]
