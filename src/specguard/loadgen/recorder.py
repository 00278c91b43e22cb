"""Turns finished streams into request records and appends them to requests.jsonl, in a child process.

The event loop that times the streams only pickles each finished stream's
raw bytes and arrival times into a pipe. Parsing a response costs about 5 µs
per chunk (1.5 ms for a 300-token answer), and on the loop that would delay
every other stream's timestamps; the child does it, writes and fsyncs the
record, and reports a one-line progress note back. The child ignores SIGINT
(the terminal sends it to the whole process group) and drains its pipe to
the end, so Ctrl-C or even SIGKILL of the parent loses no finished request.

Frame on the pipe: 4-byte big-endian length, then a pickled FinishedStream.
"""

from __future__ import annotations

import argparse
import os
import asyncio
import json
import pickle
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from specguard.loadgen.client import StreamResult, TokenCounter, chunk_token_counts, finish_stream
from specguard.results.models import RequestRecord
from specguard.results.store import JsonlAppender

_LEN = struct.Struct(">I")


@dataclass
class FinishedStream:
    index: int
    seq: int
    request_id: str
    segment: str
    scheduled_s: float
    sent_s: float
    body: dict[str, Any]
    result: StreamResult


@dataclass
class Progress:
    seq: int
    ok: bool
    output_tokens: int


def to_record(f: FinishedStream, api: str, tokenizer: TokenCounter | None) -> RequestRecord:
    res = finish_stream(f.result, api)
    times, tokens, source, total = chunk_token_counts(res, tokenizer)
    return RequestRecord(
        index=f.index,
        seq=f.seq,
        request_id=f.request_id,
        segment=f.segment,
        ok=res.ok,
        error=res.error,
        http_status=res.http_status,
        scheduled_s=f.scheduled_s,
        sent_s=f.sent_s,
        send_lag_s=max(0.0, f.sent_s - f.scheduled_s),
        ttft_s=times[0] if times else None,
        e2e_s=times[-1] if times else None,
        stream_end_s=res.stream_end,
        chunk_times_s=times,
        chunk_tokens=tokens,
        token_source=source,
        prompt_tokens=res.final_usage_prompt,
        output_tokens=total,
        finish_reason=res.finish_reason,
        temperature=f.body.get("temperature"),
        max_tokens=f.body.get("max_tokens"),
    )


class Recorder:
    """The parent's side: a write pipe to the record worker and a read pipe for its progress notes."""

    def __init__(self, out: Path, api: str, tokenizer_dir: Path | None, on_progress: Callable[[Progress], None]) -> None:
        self.argv = [sys.executable, "-m", "specguard.loadgen.recorder", "--out", str(out), "--api", api]
        if tokenizer_dir is not None:
            self.argv += ["--tokenizer", str(tokenizer_dir)]
        self.on_progress = on_progress
        self.proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.WriteTransport | None = None
        self._reader_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        loop = asyncio.get_running_loop()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._writer, _ = await loop.connect_write_pipe(asyncio.Protocol, self.proc.stdin)
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self.proc.stdout)
        # Its imports take a second of CPU: wait for them before any request is timed.
        if (await reader.readline()).strip() != b"ready":
            raise RuntimeError("the record writer process did not start")
        self._reader_task = asyncio.create_task(self._read_progress(reader))

    async def _read_progress(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            seq, ok, tokens = json.loads(line)
            self.on_progress(Progress(seq=seq, ok=ok, output_tokens=tokens))

    def submit(self, finished: FinishedStream) -> None:
        data = pickle.dumps(finished, protocol=pickle.HIGHEST_PROTOCOL)
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(_LEN.pack(len(data)) + data)

    async def close(self) -> None:
        """Let the worker write everything submitted, and wait for it to exit. Safe to call twice."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if self._writer is not None:
            self._writer.close()
        await asyncio.to_thread(proc.wait)
        if self._reader_task is not None:
            await self._reader_task
        if proc.returncode != 0:
            raise RuntimeError(f"the record writer exited with code {proc.returncode}")


def _read_frames(stream: BinaryIO) -> Any:
    while True:
        head = stream.read(_LEN.size)
        if len(head) < _LEN.size:
            return
        (n,) = _LEN.unpack(head)
        body = stream.read(n)
        if len(body) < n:
            return  # the parent died mid-frame: that stream never finished sending
        yield pickle.loads(body)


def _main() -> None:
    p = argparse.ArgumentParser(description="specguard's request-record writer (started by specguard bench)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--api", required=True)
    p.add_argument("--tokenizer", type=Path)
    a = p.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tokenizer = None
    # Yield the CPU to the load generator, whose timestamps are the measurement.
    os.nice(10)
    if a.tokenizer is not None:
        from specguard.loadgen.tokenizer import local_token_counter

        tokenizer = local_token_counter(a.tokenizer)
    out = JsonlAppender(a.out)
    print("ready", flush=True)
    for finished in _read_frames(sys.stdin.buffer):
        record = to_record(finished, a.api, tokenizer)
        out.append(record)
        try:
            sys.stdout.write(json.dumps([record.seq, record.ok, record.output_tokens or 0]) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            pass  # the parent is gone; keep writing records
    out.close()


if __name__ == "__main__":
    _main()
