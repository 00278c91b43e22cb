"""Signals end `bench` the same clean way and leave no process behind; full, read-only and vanished outputs fail cleanly.

Signals are sent the way a terminal (SIGINT to the process group), `systemctl stop`
(SIGTERM to every process of the unit), `docker stop` (SIGTERM to PID 1) and the
kernel's OOM killer or a `kill -9` (SIGKILL to the parent only) send them. Each bench
runs in a session of its own so that "the whole group" is exactly its processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specguard.results.models import RunInfo
from specguard.results.run_dir import load_run
from tests.helpers import descendants, no_traceback, sigint_default, wait_gone


def start_bench(server, out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specguard",
            "bench",
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--prompts",
            "synthetic:random",
            "--out",
            str(out),
            "--quiet",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
        start_new_session=True,
    )


def wait_records(out: Path, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    path = out / "requests.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} records in {path} after {timeout_s} s")


def children_of(proc: subprocess.Popen[str], expected: int, timeout_s: float = 20.0) -> set[int]:
    """The bench's helper processes (record writer, scraper), once they are all up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kids = descendants(proc.pid)
        if len(kids) >= expected:
            return kids
        time.sleep(0.05)
    raise AssertionError(f"expected {expected} child processes, found {descendants(proc.pid)}")


SIGNALS = [
    pytest.param(signal.SIGINT, False, id="SIGINT-to-pid"),
    pytest.param(signal.SIGINT, True, id="SIGINT-to-group(terminal)"),
    pytest.param(signal.SIGTERM, False, id="SIGTERM-to-pid(docker-stop)"),
    pytest.param(signal.SIGTERM, True, id="SIGTERM-to-group(systemctl-stop)"),
    pytest.param(signal.SIGHUP, True, id="SIGHUP-to-group(terminal-closed)"),
]


@pytest.mark.parametrize(("sig", "to_group"), SIGNALS)
def test_bench_interrupted_keeps_records_finalises_and_exits_130(scripted, tmp_path, sig, to_group):
    server = scripted(ttft_ms=20, interval_ms=30, chunks=10)
    out = tmp_path / "run"
    proc = start_bench(server, out, "--concurrency", "4", "--duration", "120")
    kids = children_of(proc, 2)
    wait_records(out, 8)
    (os.killpg if to_group else os.kill)(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and no_traceback(stdout, stderr)
    info = RunInfo.model_validate_json((out / "run.json").read_text())
    assert info.interrupted and info.interrupted_phase == "measurement"
    _, records, _ = load_run(out)
    assert sum(r.ok for r in records) >= 8
    cut = [r for r in records if not r.ok]
    assert cut, "the four requests in flight are recorded"
    assert all("interrupted" in (r.error or "") for r in cut)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["requests"] == len(records)
    assert not wait_gone(kids, 10), "no helper process outlives the run"


def test_bench_sigkill_of_the_parent_leaves_no_child_and_keeps_every_finished_record(scripted, tmp_path):
    server = scripted(ttft_ms=20, interval_ms=30, chunks=10)
    out = tmp_path / "run"
    proc = start_bench(server, out, "--concurrency", "4", "--duration", "120")
    kids = children_of(proc, 2)
    wait_records(out, 8)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert not wait_gone(kids, 15), "the record writer and the scraper end when their parent dies"
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) >= 8 and all(json.loads(x)["ok"] for x in lines)
    # summary reads the killed run by recomputing it from its records, and says it is incomplete
    r = subprocess.run(
        [sys.executable, "-m", "specguard", "summary", str(out), "--json"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["incomplete"] is True and summary["requests"] == len(lines)
    assert any("incomplete" in w for w in summary["warnings"])


def test_interrupt_during_warmup_says_so(scripted, tmp_path):
    server = scripted(ttft_ms=50, interval_ms=50, chunks=10)
    out = tmp_path / "run"
    proc = start_bench(server, out, "--num-requests", "5", "--warmup", "100")
    children_of(proc, 1)
    time.sleep(2.0)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted during warm-up" in stderr and no_traceback(stdout, stderr)
    info = RunInfo.model_validate_json((out / "run.json").read_text())
    assert info.interrupted and info.interrupted_phase == "warm-up"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == 0 and "warm-up" in summary["notes"][0]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[callable]:
    """tmpfs mounts of a given size, read-only if asked (the tests run as root: permissions alone stop nothing)."""
    mounts: list[Path] = []

    def mount(name: str, size: str = "256k", read_only: bool = False) -> Path:
        target = tmp_path / name
        target.mkdir()
        opts = f"size={size}" + (",ro" if read_only else "")
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(target)], check=True)
        mounts.append(target)
        return target

    yield mount
    for m in mounts:
        subprocess.run(["umount", "-l", str(m)], check=False)


def test_full_disk_is_one_clean_error_and_keeps_written_records(scripted, small_fs):
    server = scripted(ttft_ms=2, interval_ms=2, chunks=40)
    out = small_fs("full", size="96k") / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specguard",
            "bench",
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--prompts",
            "synthetic:random",
            "--out",
            str(out),
            "--concurrency",
            "4",
            "--num-requests",
            "2000",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 4, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], r.stderr
    assert no_traceback(r.stdout, r.stderr) and r.stderr.count("No space left") == 1
    lines = (out / "requests.jsonl").read_text().split("\n")
    whole = [json.loads(x) for x in lines[:-1]]
    assert len(whole) >= 5 and all(rec["ok"] for rec in whole), "every record written before the disk filled is kept"
    assert len(server.chunk_logs()) < 2000, "the run stopped when it could not record"


def test_read_only_output_is_one_clean_error(scripted, small_fs):
    server = scripted(ttft_ms=2, interval_ms=2, chunks=4)
    out = small_fs("ro", read_only=True) / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specguard",
            "bench",
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--prompts",
            "synthetic:random",
            "--out",
            str(out),
            "--num-requests",
            "3",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 4, r.stderr
    assert "Read-only file system" in r.stderr and no_traceback(r.stdout, r.stderr)
    assert server.chunk_logs() == {}, "nothing is sent when nothing can be recorded"


def test_vanished_output_directory_is_one_clean_error(scripted, tmp_path):
    server = scripted(ttft_ms=20, interval_ms=30, chunks=10)
    out = tmp_path / "run"
    proc = start_bench(server, out, "--concurrency", "2", "--num-requests", "40")
    wait_records(out, 2)
    subprocess.run(["rm", "-rf", str(out)], check=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 4, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(out) in errors[0] and no_traceback(stdout, stderr)
