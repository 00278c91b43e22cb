"""The run loop of ``specguard bench``: warm-up, scheduled release, recording, scraping, summary.

Open-loop shapes release each request at its scheduled time whatever the
server does; closed-loop shapes keep a fixed number in flight. Each request is
sent exactly once, never retried, and its record is on disk the moment it
finishes. An interruption (Ctrl-C, SIGTERM) records the requests in flight as
interrupted errors and still writes a summary.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import time
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Literal, TypeVar

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from specguard import __version__
from specguard.analysis.client_stalls import STALL_THRESHOLD_S
from specguard.analysis.summarize import ClientLagLimits, summarize
from specguard.errors import OptionError, OutputWriteError
from specguard.lifetime import busy_poll_cpus, set_cpus, terminations_cancel
from specguard.loadgen.arrivals import OPEN_LOOP, arrival_times, closed_loop_workers, prompt_order
from specguard.loadgen.client import StreamResult, build_payload, stream_request
from specguard.loadgen.extras import merge_extra_body, stored_headers
from specguard.loadgen.prompts import PromptSet
from specguard.loadgen.read_probe import ReadLagProbe
from specguard.loadgen.recorder import OutputMode, Recorder, RecordWritten
from specguard.results.models import (
    GpuSample,
    LoadShape,
    MetricsSample,
    RequestRecord,
    RunInfo,
    SamplingOverrides,
    Slo,
    Summary,
)
from specguard.results.run_dir import RunDir, RunWriter, load_gpu_samples
from specguard.results.store import JsonlAppender, read_jsonl
from specguard.server_metrics.gpu import gpu_source
from specguard.server_metrics.scraper import ScraperProcess, scrape_once
from specguard.server_metrics.server_facts import auth_headers, inspect_server
from specguard.simulated import SIMULATED_SERVER_BANNER, is_simulated_version
from specguard.validation import HttpUrl
from specguard.vllm.urls import endpoint_url, server_root

T = TypeVar("T")


# Below this a scrape of vLLM's /metrics (about 30 ms of parsing for a few hundred series) is most of an interval.
MIN_SCRAPE_INTERVAL_S = 0.1
PROBE_TIMEOUT_S = 5.0  # /version and /v1/models before a run: a server that cannot answer them fast is not ready


class BenchConfig(BaseModel):
    """One bench run; the bounds are those of the command line (``specguard bench``) and of a check plan."""

    model_config = ConfigDict(arbitrary_types_allowed=True, allow_inf_nan=False)

    base_url: HttpUrl
    model: str = Field(min_length=1)
    api: Literal["completions", "chat"] = "completions"
    prompts: PromptSet
    load: LoadShape
    sampling: SamplingOverrides = SamplingOverrides()
    metrics_url: HttpUrl | None = None
    gpu_metrics_url: HttpUrl | Literal["none"] | None = Field(
        default=None, description="a DCGM exporter's page; None: NVML for a server on loopback; 'none': no GPU sampling"
    )
    out_dir: Path
    api_key: str | None = None
    request_timeout_s: float = Field(default=600.0, gt=0)
    default_max_tokens: int = Field(default=64, ge=1)
    scrape_interval_s: float = Field(default=1.0, ge=MIN_SCRAPE_INTERVAL_S)
    lag_limits: ClientLagLimits = ClientLagLimits()
    busy_poll: bool = False
    slo: Slo | None = None
    headers: dict[str, str] = Field(default_factory=dict, description="sent on every request (see loadgen/extras)")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")
    labels: dict[str, str] = Field(default_factory=dict, description="metadata stored in run.json")
    outputs: OutputMode = Field(
        default="off",
        description="compare: ask for token ids and write outputs.jsonl (a check's greedy comparison); "
        "keep: also the ids in requests.jsonl (--keep-output)",
    )


class ProgressSink:
    """Receives progress events; the CLI renders them, tests and --quiet ignore them."""

    def started(self, total: int | None, duration_s: float | None) -> None: ...

    def finished(self, progress: RecordWritten) -> None: ...


class MatrixProgress(ProgressSink):
    """A matrix of runs (a check's blocks x cells): its shape, each block and run as it starts, and every request.

    The per-request events are ProgressSink's, so one object follows the whole check; the base ignores all.
    """

    def matrix_started(self, blocks: int, runs: int, requests: int | None) -> None:
        """What is to run: blocks, runs in all, and requests in all (None when a run is timed, not counted)."""

    def requests_expected(self, requests: int) -> None:
        """With timed runs at a rate: the requests expected in all (rate x duration), a total to show as about."""

    def block_started(self, name: str) -> None: ...

    def run_started(self, cell: str) -> None: ...

    def run_finished(self) -> None: ...

    def block_finished(self) -> None: ...


class _Run:
    def __init__(self, cfg: BenchConfig, recorder: Recorder):
        self.cfg = cfg
        self.recorder = recorder
        self.url = endpoint_url(cfg.base_url, cfg.api)
        self.headers = {**cfg.headers, "Content-Type": "application/json", **auth_headers(cfg.api_key)}
        self.run_tag = uuid.uuid4().hex[:8]
        self.t0 = 0.0
        self.loop_lags: list[float] = []
        self.stalls: list[tuple[float, float]] = []  # (start, end), run-clock seconds: see analysis/client_stalls

    async def one(self, session: aiohttp.ClientSession, seq: int, item_no: int, scheduled: float) -> None:
        item = self.cfg.prompts.items[item_no]
        cfg = self.cfg
        body = build_payload(cfg.api, cfg.model, item, cfg.sampling, cfg.default_max_tokens, cfg.outputs != "off")
        body = merge_extra_body(body, self.cfg.extra_body)
        request_id = f"specguard-{self.run_tag}-{seq}"
        headers = {**self.headers, "X-Request-Id": request_id}
        res = StreamResult()
        sent_at = time.monotonic()
        try:
            await stream_request(
                session,
                self.url,
                self.cfg.api,
                body,
                headers,
                self.cfg.request_timeout_s,
                sent_at,
                res,
                on_pieces=lambda pieces: self.recorder.pieces(seq, pieces),
            )
        finally:
            self.recorder.submit(
                self.cfg.prompts.lines[item_no], seq, request_id, item.segment, scheduled, sent_at - self.t0, body, res, item_no
            )

    async def warmup(self, session: aiohttp.ClientSession) -> None:
        order = prompt_order(len(self.cfg.prompts.items), self.cfg.load.seed + 7)
        for _ in range(self.cfg.load.warmup_requests):
            item = self.cfg.prompts.items[next(order)]
            body = build_payload(self.cfg.api, self.cfg.model, item, self.cfg.sampling, self.cfg.default_max_tokens)
            body = merge_extra_body(body, self.cfg.extra_body)
            timeout = self.cfg.request_timeout_s
            await stream_request(session, self.url, self.cfg.api, body, self.headers, timeout, time.monotonic())

    async def monitor_loop_lag(self) -> None:
        period = 0.01
        while True:
            t = time.monotonic()
            await asyncio.sleep(period)
            woke = time.monotonic()
            lag = max(0.0, woke - t - period)
            self.loop_lags.append(lag)
            if lag >= STALL_THRESHOLD_S:
                self.stalls.append((t + period - self.t0, woke - self.t0))

    async def dispatch(self, session: aiohttp.ClientSession) -> None:
        load = self.cfg.load
        order = prompt_order(len(self.cfg.prompts.items), load.seed)
        if load.kind in OPEN_LOOP:
            tasks: set[asyncio.Task[None]] = set()
            try:
                schedule = arrival_times(
                    load.kind,
                    rate=load.rate,
                    burstiness=load.burstiness or 1.0,
                    num_requests=load.num_requests,
                    duration_s=load.duration_s,
                    seed=load.seed,
                )
                for seq, at in enumerate(schedule):
                    delay = self.t0 + at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    task = asyncio.create_task(self.one(session, seq, next(order), at))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                while tasks:
                    await asyncio.wait(set(tasks))
            finally:
                await _cancel_all(tasks)
            return
        concurrency = closed_loop_workers(load)
        counter = itertools.count()
        deadline = self.t0 + load.duration_s if load.duration_s is not None else None

        async def worker() -> None:
            while True:
                if deadline is not None and time.monotonic() >= deadline:
                    return
                seq = next(counter)
                if load.num_requests is not None and seq >= load.num_requests:
                    return
                await self.one(session, seq, next(order), time.monotonic() - self.t0)

        workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            await _cancel_all(set(workers))


async def _busy_poll() -> None:
    """Keep the event loop polling instead of sleeping in epoll.

    On a virtual machine, waking a halted vCPU for each arriving chunk costs
    0.3 to 2 ms, which would be measured as latency. Polling keeps the client
    on its core (it costs that core) so that arrivals are seen within
    microseconds.
    """
    while True:
        await asyncio.sleep(0)


async def _cancel_all(tasks: set[asyncio.Task[None]]) -> None:
    pending = [t for t in tasks if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


def check_model_served(model: str, served: list[str] | None, root: str, named_by: str = "--model") -> None:
    """A wrong --model gets a 404 for every request; say so before sending any, with the names the server serves.

    ``named_by``: where the model was given, an option or a check plan's key path.
    """
    if served is not None and model not in served:
        names = ", ".join(served) or "none"
        raise OptionError(f"{named_by} {model}: the server at {root} does not serve that model; it serves: {names}")


def sent_sampling(cfg: BenchConfig) -> dict[str, list[float | int | bool | None]]:
    """The sampling values that go on the wire, per key, over every prompt the run may send."""
    return sampling_on_the_wire(cfg.api, cfg.prompts, cfg.sampling, cfg.default_max_tokens)


def sampling_on_the_wire(
    api: str, prompts: PromptSet, sampling: SamplingOverrides, default_max_tokens: int
) -> dict[str, list[float | int | bool | None]]:
    """``sent_sampling`` before a run exists: what a check's cell will send (compared with an imported baseline's)."""
    seen: dict[str, set[float | int | bool | None]] = {k: set() for k in ("temperature", "top_p", "max_tokens", "ignore_eos")}
    for item in prompts.items:
        body = build_payload(api, "model", item, sampling, default_max_tokens)
        for key, values in seen.items():
            values.add(body.get(key))
    return {k: sorted(v, key=lambda x: (x is None, x)) for k, v in seen.items()}


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop: its wake-ups and socket reads are several times cheaper than asyncio's own loop.

    Where uvloop is not installed (pyproject leaves it out on Windows) asyncio's
    own loop runs it, with coarser timestamps under load. Ctrl-C cancels the main task (asyncio's runner does that); SIGTERM and
    SIGHUP are made to do the same, so a run always finishes its files.
    """

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        with terminations_cancel(task.cancel):
            return await coro

    try:
        import uvloop
    except ImportError:
        return asyncio.run(main())
    return uvloop.run(main())


async def run_bench(
    cfg: BenchConfig,
    progress: ProgressSink | None = None,
    tokenizer_dir: Path | None = None,
) -> Summary:
    """Run one benchmark into ``cfg.out_dir`` and return its summary (also written as summary.json).

    Before any file is written the server is asked for its version and models;
    a model it does not serve is an ``OptionError``. An interruption returns an
    interrupted summary; a recorder that cannot write raises ``OutputWriteError``
    after keeping every record already on disk.
    """
    progress = progress or ProgressSink()
    root = server_root(cfg.base_url)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        facts = await asyncio.to_thread(inspect_server, root, cfg.api_key, PROBE_TIMEOUT_S, read_metrics=False)
        server_version, served = facts.version, facts.served_names
        check_model_served(cfg.model, served, root)
        writer = RunWriter(cfg.out_dir)
        try:
            return await _measure(cfg, session, writer, server_version, progress, tokenizer_dir)
        finally:
            writer.close()


async def _measure(
    cfg: BenchConfig,
    session: aiohttp.ClientSession,
    writer: RunWriter,
    server_version: str | None,
    progress: ProgressSink,
    tokenizer_dir: Path | None,
) -> Summary:
    return await _Measurement(cfg, session, writer, server_version, progress, tokenizer_dir).run()


class _Measurement:
    """One run after the probe, as named steps; its state is what the steps hand each other and the cleanup."""

    def __init__(
        self,
        cfg: BenchConfig,
        session: aiohttp.ClientSession,
        writer: RunWriter,
        server_version: str | None,
        progress: ProgressSink,
        tokenizer_dir: Path | None,
    ) -> None:
        main_task = asyncio.current_task()
        assert main_task is not None
        self.main_task = main_task
        self.cfg, self.session, self.writer, self.progress = cfg, session, writer, progress
        self.cpus = busy_poll_cpus() if cfg.busy_poll else None
        self.previous_cpus = os.sched_getaffinity(0) if self.cpus else None
        self.helper_cpus = self.cpus[1] if self.cpus else None
        self.recorder = Recorder(
            writer.requests_path,
            cfg.api,
            tokenizer_dir,
            progress.finished,
            on_failure=main_task.cancel,
            cpus=self.helper_cpus,
            outputs=cfg.outputs,
        )
        self.run_state = _Run(cfg, self.recorder)
        self.phase: Literal["warm-up", "measurement"] = "warm-up"
        self.interrupted = False
        self.info = _run_info(cfg, server_version)
        self.scraper: ScraperProcess | None = None
        self.gpu_unavailable: str | None = None
        self.gc_was_enabled = False
        self.read_probe: ReadLagProbe | None = None

    async def run(self) -> Summary:
        try:
            try:
                await self._start_helpers()
                await self.run_state.warmup(self.session)
                first = await self._scrape_before()
                self._start_clock(first)
                await self._dispatch()
            except asyncio.CancelledError:
                # Ctrl-C, SIGTERM, or a record writer that failed: finish the bookkeeping below, then end normally.
                self.interrupted = self.recorder.failure is None
                self.main_task.uncancel()
            await self._scrape_after()
        finally:
            await self._release()
        return self._finish()

    async def _start_helpers(self) -> None:
        """The record writer and the scraper start side by side: each waits for its child's imports (0.6 s of
        CPU apiece), which one after the other were most of a short run's fixed cost."""
        gpu, self.gpu_unavailable = gpu_source(self.cfg.base_url, self.cfg.gpu_metrics_url)
        if not (self.cfg.metrics_url or gpu):
            await self.recorder.start()
            return
        gpu_out = RunDir(self.cfg.out_dir).gpu_metrics_jsonl
        self.scraper = ScraperProcess(
            self.cfg.metrics_url, self.cfg.scrape_interval_s, self.writer.metrics.path, self.helper_cpus, gpu, gpu_out
        )
        # gather waits for both even when one fails, so _release finds both children started or not at all
        results = await asyncio.gather(self.recorder.start(), asyncio.to_thread(self.scraper.launch), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _scrape_before(self) -> MetricsSample | None:
        if not self.cfg.metrics_url:
            return None
        first = await scrape_once(self.session, self.cfg.metrics_url, time.monotonic(), "before")
        self.info.cache_config = first.cache_config
        return first

    def _start_clock(self, first: MetricsSample | None) -> None:
        """Time zero of the measurement: garbage collection off, the busy-poll core taken, run.json written."""
        # No cyclic garbage collection while timing: a collection paused the loop for 1-3 ms, always at the
        # same chunks (200 streams: the 3rd and 10th of each), and every stream receiving in that moment was
        # stamped late by as much. Reference counting still frees nearly everything: 2,000 requests left 355
        # objects in cycles (20 MB peak growth in all), collected at the end.
        gc.collect()
        gc.freeze()
        self.gc_was_enabled = gc.isenabled()
        gc.disable()
        if self.cpus is not None:
            set_cpus(self.cpus[0])
        t0 = self.run_state.t0 = time.monotonic()
        self.info.started_unix = time.time()
        self.info.started_monotonic = t0
        if first is not None:
            self.writer.metrics.append(first.model_copy(update={"t_s": 0.0}))
        if self.scraper is not None:
            self.scraper.begin(t0)
        if self.gpu_unavailable is not None:
            self._record_gpu_unavailable(self.gpu_unavailable)
        self.writer.write_run(self.info)
        self.phase = "measurement"

    def _record_gpu_unavailable(self, reason: str) -> None:
        """The one line of a run whose GPUs cannot be sampled: the reason, kept with the run."""
        appender = JsonlAppender(RunDir(self.cfg.out_dir).gpu_metrics_jsonl)
        try:
            appender.append(GpuSample(t_s=0.0, phase="before", source=None, ok=False, error=reason), sync=False)
        finally:
            appender.close()

    async def _dispatch(self) -> None:
        lag_task = asyncio.create_task(self.run_state.monitor_loop_lag())
        spin_task = asyncio.create_task(_busy_poll()) if self.cfg.busy_poll else None
        self.read_probe = ReadLagProbe(self.run_state.t0)
        await self.read_probe.start()
        self.progress.started(self.cfg.load.num_requests, self.cfg.load.duration_s)
        try:
            await self.run_state.dispatch(self.session)
        finally:
            lag_task.cancel()
            self.read_probe.stop()
            if spin_task is not None:
                spin_task.cancel()

    async def _scrape_after(self) -> None:
        if self.scraper is None or self.phase != "measurement" or self.recorder.failure is not None:
            return
        self.scraper.stop()
        self.scraper = None
        if self.cfg.metrics_url is None:  # the scraper sampled GPUs only
            return
        try:
            # vLLM updates its counters as it emits the last chunk; give it a moment.
            await asyncio.sleep(0.3)
            self.writer.metrics.append(await scrape_once(self.session, self.cfg.metrics_url, self.run_state.t0, "after"))
        except asyncio.CancelledError:  # a second signal: no "after" scrape, the run still closes its files
            self.interrupted = True
            self.main_task.uncancel()

    async def _release(self) -> None:
        if self.gc_was_enabled:
            gc.enable()
        gc.unfreeze()
        set_cpus(self.previous_cpus)
        if self.scraper is not None:
            self.scraper.stop()
        await self.recorder.close()

    def _finish(self) -> Summary:
        """The run's summary from what is on disk, and run.json and summary.json written beside the records."""
        self._stamp_end()
        records, samples, gpu_samples = self._read_back()
        summary = summarize(
            records,
            samples,
            gpu_samples=gpu_samples,
            interrupted=self.interrupted,
            loop_lags_s=self.run_state.loop_lags,
            read_lags_s=self.read_probe.lags if self.read_probe is not None else None,
            stalls_s=self._stalls(),
            limits=self.cfg.lag_limits,
            slo=self.cfg.slo,
        )
        if self.interrupted and self.phase == "warm-up":
            summary.notes.insert(0, "interrupted during warm-up: no request was measured")
        if is_simulated_version(self.info.server_version):
            summary.notes.insert(0, SIMULATED_SERVER_BANNER)  # first, in summary.json and on the terminal
        if self.recorder.failure is not None:
            raise OutputWriteError(
                f"{self.writer.requests_path}: {self.recorder.failure}; the {len(records)} records written before it are kept"
            )
        self._write_outputs(summary, len(records))
        return summary

    def _stalls(self) -> list[tuple[float, float]]:
        """The loop probe's stalls and the read probe's, one list: either means reads were stamped late then."""
        read = self.read_probe.stalls if self.read_probe is not None else []
        merged: list[tuple[float, float]] = []
        for start, end in sorted([*self.run_state.stalls, *read]):
            if merged and start <= merged[-1][1]:  # both probes saw the same stall
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged

    def _stamp_end(self) -> None:
        self.info.finished_unix = time.time()
        self.info.interrupted = self.interrupted
        self.info.interrupted_phase = self.phase if self.interrupted else None

    def _read_back(self) -> tuple[list[RequestRecord], list[MetricsSample], list[GpuSample]]:
        if not self.cfg.out_dir.is_dir():
            raise OutputWriteError(
                f"{self.cfg.out_dir}: the output directory vanished during the run; its request records went with it"
            )
        records = read_jsonl(self.writer.requests_path, RequestRecord)
        records.sort(key=lambda r: r.seq)
        return records, read_jsonl(self.writer.metrics.path, MetricsSample), load_gpu_samples(self.cfg.out_dir)

    def _write_outputs(self, summary: Summary, n_records: int) -> None:
        out_dir = self.cfg.out_dir
        try:
            self.writer.write_run(self.info)
            self.writer.write_summary(summary)
        except OSError as exc:
            if not out_dir.is_dir():
                raise OutputWriteError(
                    f"{out_dir}: the output directory vanished during the run; its {n_records} request records went with it"
                ) from exc
            raise OutputWriteError(
                f"{out_dir}: cannot write the run's files ({exc.strerror or exc}); the "
                f"{n_records} request records are kept in {self.writer.requests_path}"
            ) from exc


def _run_info(cfg: BenchConfig, server_version: str | None) -> RunInfo:
    """run.json as it is before the measurement starts; the start and end are stamped as they happen."""
    return RunInfo(
        tool_version=__version__,
        base_url=cfg.base_url,
        api=cfg.api,
        model=cfg.model,
        metrics_url=cfg.metrics_url,
        gpu_source=gpu_source(cfg.base_url, cfg.gpu_metrics_url)[0],
        prompt_source=cfg.prompts.source,
        prompt_count=len(cfg.prompts.items),
        prompt_sha256=cfg.prompts.sha256,
        prompt_generator=cfg.prompts.generator,
        load=cfg.load,
        sampling=cfg.sampling,
        sent_sampling=sent_sampling(cfg),
        server_version=server_version,
        labels=cfg.labels,
        headers=stored_headers(cfg.headers),
        extra_body=cfg.extra_body or None,
        started_unix=time.time(),
        started_monotonic=time.monotonic(),
        slo=cfg.slo,
    )
