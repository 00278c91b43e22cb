"""Turns finished streams into request records and appends them to requests.jsonl, in a child process.

The event loop that times the streams only pickles each finished stream's
raw bytes and arrival times into a pipe. Parsing a response costs about 5 µs
per chunk (1.5 ms for a 300-token answer), and on the loop that would delay
every other stream's timestamps; the child does it, writes the record, and
reports a one-line progress note back. The child ignores SIGINT, SIGTERM
and SIGHUP (a terminal, ``systemctl stop`` and ``docker stop`` signal the
whole group) and drains its pipe to the end, so an interrupt or even SIGKILL
of the parent loses no finished request: the pipe closes when the parent
dies, and the child exits after writing what it holds. If it cannot write
(disk full, read-only or vanished directory), it says so once on its
progress pipe, ``{"error": "..."}``, and exits 3; the parent stops the run.

With ``--outputs compare`` it also writes each request's output (token ids,
or the text when the server sends none) to ``outputs.jsonl`` beside the
records, for a check's greedy-output comparison; with ``--outputs keep`` the
ids go into requests.jsonl too (``--keep-output``: outputs may be sensitive).

Frame on the pipe: 4-byte big-endian length, then a pickle of either
``("P", seq, reads)`` (reads of a stream still running) or ``("F", ...)``, the
fields of a FinishedStream in order with its StreamResult flattened (the
stream's last reads and everything else about the request). Plain tuples, not
the dataclass: pickling one took 11 us against 3 us. Finished streams are
sent in batches, ``("B", [F, F, ...])``, at most ``BATCH_S`` after they end
and at most ``BATCH_MAX`` at a time: at the end of a burst of 200 streams, one
pickle and one pipe write per stream stamped the last streams' final chunks
2-5 ms late, and so did one batch of everything that ended in 10 ms (105
streams, a 2.1 ms pickle during which no read was stamped); 16 streams pickle
in about 0.2 ms. A SIGKILL of the parent can lose what finished in its last
``BATCH_S``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from specguard.errors import HelperProcessError, OutputWriteError
from specguard.lifetime import ignore_interrupts, set_cpus, yield_cpu
from specguard.loadgen.sse import (
    ParsedStream,
    SSEParser,
    TokenCounter,
    chunk_token_counts,
    output_text,
    output_token_ids,
)
from specguard.loadgen.stream_result import StreamResult
from specguard.results.models import OutputRecord, RequestRecord, TokenSource
from specguard.results.run_dir import RunDir
from specguard.results.store import JsonlAppender

_LEN = struct.Struct(">I")
# off: no outputs; compare: outputs.jsonl for a check's comparison; keep: that, and the ids in requests.jsonl
OutputMode = Literal["off", "compare", "keep"]
SYNC_EVERY_S = 0.2
BATCH_S = 0.01
BATCH_MAX = 16


@dataclass
class FinishedStream:
    index: int
    seq: int
    request_id: str
    segment: str
    scheduled_s: float
    sent_s: float
    temperature: float | None
    max_tokens: int | None
    result: StreamResult
    item: int | None = None

    @classmethod
    def from_frame(cls, frame: tuple[Any, ...]) -> FinishedStream:
        _, index, seq, request_id, segment, scheduled_s, sent_s, temperature, max_tokens, error, status, end, reads, item = frame
        return cls(
            index,
            seq,
            request_id,
            segment,
            scheduled_s,
            sent_s,
            temperature,
            max_tokens,
            StreamResult(error=error, http_status=status, stream_end=end, pieces=reads),
            item,
        )


@dataclass
class RecordWritten:
    seq: int
    ok: bool
    output_tokens: int


@dataclass(frozen=True)
class StreamMeasures:
    """What bench (and the canary proxy) make of one streamed response: the latencies and token counts of a record."""

    ok: bool
    error: str | None
    ttft_s: float | None
    e2e_s: float | None
    stream_end_s: float | None
    chunk_times_s: list[float]
    chunk_tokens: list[int]
    token_source: TokenSource | None
    prompt_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None

    def record_fields(self) -> dict[str, Any]:
        """The latency and token fields as a bench record and a canary record both name them."""
        return {
            "ttft_s": self.ttft_s,
            "e2e_s": self.e2e_s,
            "stream_end_s": self.stream_end_s,
            "chunk_times_s": self.chunk_times_s,
            "chunk_tokens": self.chunk_tokens,
            "token_source": self.token_source,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "finish_reason": self.finish_reason,
        }


def measure_stream(res: StreamResult, parsed: ParsedStream, tokenizer: TokenCounter | None) -> StreamMeasures:
    """The one definition of a streamed request's measures, shared by bench's records and the canary's.

    Times are those of ``res`` (seconds after the send); a stream without ``[DONE]`` is an error.
    """
    error = res.error or parsed.error
    if error is None and not parsed.done:
        error = "stream ended before [DONE]"
    times, tokens, source, total = chunk_token_counts(parsed, tokenizer)
    # No stream came back (an HTTP error, or no response at all): there were no chunks to count, so the
    # record says "unknown" (None), not "0 tokens by chunk count".
    streamed = res.http_status == 200
    return StreamMeasures(
        ok=error is None,
        error=error,
        ttft_s=times[0] if times else None,
        e2e_s=times[-1] if times else None,
        stream_end_s=res.stream_end,
        chunk_times_s=times,
        chunk_tokens=tokens,
        token_source=source if streamed else None,
        prompt_tokens=parsed.prompt_tokens,
        output_tokens=total if streamed else None,
        finish_reason=parsed.finish_reason,
    )


def to_record(
    f: FinishedStream, parsed: ParsedStream, tokenizer: TokenCounter | None, keep_output: bool = False
) -> RequestRecord:
    m = measure_stream(f.result, parsed, tokenizer)
    return RequestRecord(
        index=f.index,
        seq=f.seq,
        request_id=f.request_id,
        segment=f.segment,
        ok=m.ok,
        error=m.error,
        http_status=f.result.http_status,
        scheduled_s=f.scheduled_s,
        sent_s=f.sent_s,
        send_lag_s=max(0.0, f.sent_s - f.scheduled_s),
        **m.record_fields(),
        temperature=f.temperature,
        max_tokens=f.max_tokens,
        item=f.item,
        output_token_ids=output_token_ids(parsed) if keep_output else None,
    )


def to_output(f: FinishedStream, parsed: ParsedStream) -> OutputRecord:
    """The request's output for the comparison: its token ids, or its text when the server sent no ids."""
    ids = output_token_ids(parsed)
    item = f.item if f.item is not None else f.index
    return OutputRecord(seq=f.seq, item=item, token_ids=ids, text=None if ids is not None else output_text(parsed))


class Recorder:
    """The parent's side: a write pipe to the record worker and a read pipe for its progress notes."""

    def __init__(
        self,
        out: Path,
        api: str,
        tokenizer_dir: Path | None,
        on_progress: Callable[[RecordWritten], None],
        on_failure: Callable[[], object] | None = None,
        cpus: set[int] | None = None,
        outputs: OutputMode = "off",
    ) -> None:
        self.argv = [sys.executable, "-m", "specguard.loadgen.recorder", "--out", str(out), "--api", api]
        if tokenizer_dir is not None:
            self.argv += ["--tokenizer", str(tokenizer_dir)]
        if outputs != "off":
            self.argv += ["--outputs", outputs]
        self.on_progress = on_progress
        self.on_failure = on_failure
        self.cpus = cpus
        self._finished: list[tuple[Any, ...]] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self.failure: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.WriteTransport | None = None
        self._reader_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=(lambda: set_cpus(self.cpus)) if self.cpus else None,
        )
        loop = asyncio.get_running_loop()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._writer, _ = await loop.connect_write_pipe(asyncio.Protocol, self.proc.stdin)
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self.proc.stdout)
        # Its imports take a second of CPU: wait for them before any request is timed.
        first = (await reader.readline()).strip()
        if first != b"ready":
            self.failure = _failure_text(first) or "the record writer process did not start"
            raise OutputWriteError(f"{self.argv[self.argv.index('--out') + 1]}: {self.failure}")
        self._reader_task = asyncio.create_task(self._read_progress(reader))

    async def _read_progress(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            note = json.loads(line)
            if isinstance(note, dict):
                self.failure = str(note.get("error"))
                if self.on_failure is not None:
                    self.on_failure()
                continue
            seq, ok, tokens = note
            self.on_progress(RecordWritten(seq=seq, ok=ok, output_tokens=tokens))

    def _send(self, frame: object) -> None:
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(_LEN.pack(len(data)) + data)

    def pieces(self, seq: int, pieces: list[tuple[float, bytes]]) -> None:
        """Reads of a stream still running, so the worker can parse them early."""
        self._send(("P", seq, pieces))

    def submit(
        self,
        index: int,
        seq: int,
        request_id: str,
        segment: str,
        scheduled_s: float,
        sent_s: float,
        body: dict[str, Any],
        result: StreamResult,
        item: int | None = None,
    ) -> None:
        """A finished stream, with everything its record needs; sent with the others of the next ``BATCH_S``."""
        self._finished.append(
            (
                "F",
                index,
                seq,
                request_id,
                segment,
                scheduled_s,
                sent_s,
                body.get("temperature"),
                body.get("max_tokens"),
                result.error,
                result.http_status,
                result.stream_end,
                result.pieces,
                item,
            )
        )
        if len(self._finished) >= BATCH_MAX:
            self._flush()
        elif self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(BATCH_S, self._flush)

    def _flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._finished:
            batch, self._finished = self._finished, []
            self._send(("B", batch))

    async def close(self) -> None:
        """Let the worker write everything submitted, and wait for it to exit. Safe to call twice."""
        if self.proc is None:
            return
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        self._flush()
        proc, self.proc = self.proc, None
        if self._writer is not None:
            self._writer.close()
        await asyncio.to_thread(proc.wait)
        if self._reader_task is not None:
            await self._reader_task
        if proc.returncode != 0 and self.failure is None:
            raise HelperProcessError(f"the record writer exited with code {proc.returncode}")


def _failure_text(line: bytes) -> str | None:
    try:
        note = json.loads(line)
    except ValueError:
        return None
    return str(note.get("error")) if isinstance(note, dict) else None


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
    p.add_argument("--outputs", choices=("compare", "keep"))
    a = p.parse_args()
    ignore_interrupts()
    tokenizer = None
    # Yield the CPU to the load generator, whose timestamps are the measurement.
    yield_cpu()
    if a.tokenizer is not None:
        tokenizer = _token_counter(a.tokenizer)
    try:
        out = JsonlAppender(a.out)
        outputs = JsonlAppender(RunDir(a.out.parent).outputs_jsonl) if a.outputs else None
    except OSError as exc:
        _say_failure(exc)
        return
    collect = a.outputs is not None
    print("ready", flush=True)
    last_sync = time.monotonic()
    running: dict[int, SSEParser] = {}
    for frame in _read_frames(sys.stdin.buffer):
        if frame[0] == "P":
            _, seq, pieces = frame
            running.setdefault(seq, SSEParser(a.api, collect)).feed(pieces)
            continue
        records = []
        kept: list[OutputRecord] = []
        for item in frame[1]:
            finished = FinishedStream.from_frame(item)
            parser = running.pop(finished.seq, None) or SSEParser(a.api, collect)
            parser.feed(finished.result.pieces)
            parsed = parser.result()
            records.append(to_record(finished, parsed, tokenizer, keep_output=a.outputs == "keep"))
            if outputs is not None:
                kept.append(to_output(finished, parsed))
        try:
            # A batch is flushed at once (survives the process), in one write; fsynced in groups (survives the
            # machine within 0.2 s).
            out.append_many(records, sync=False)
            if outputs is not None:
                outputs.append_many(kept, sync=False)
            if time.monotonic() - last_sync > SYNC_EVERY_S:
                out.sync()
                last_sync = time.monotonic()
        except OSError as exc:
            _say_failure(exc)
            return
        _say("\n".join(json.dumps([r.seq, r.ok, r.output_tokens or 0]) for r in records))
    out.sync()
    out.close()
    if outputs is not None:
        outputs.sync()
        outputs.close()
    sys.stdout.flush()


def _token_counter(tokenizer_dir: Path) -> TokenCounter:
    """Local token counting, the fallback when a server reports no usage."""
    from specguard.tokenizer_files import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def _say(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        pass  # the parent is gone; keep writing records


def _say_failure(exc: OSError) -> None:
    """One line to the parent, then exit 3 without a traceback: the parent reports it once."""
    _say(json.dumps({"error": f"cannot write request records: {exc.strerror or exc}"}))
    os._exit(3)


if __name__ == "__main__":
    _main()
    # Everything is written, synced and closed: skip the interpreter's teardown, which the
    # parent would otherwise wait for at the end of every run.
    os._exit(0)
