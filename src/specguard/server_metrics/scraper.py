"""/metrics scraping. A failed or unparsable scrape is recorded as a gap, never raised.

The periodic scrapes of a run happen in a child process: parsing a vLLM
metrics page with prometheus_client's pure-Python parser takes milliseconds,
and doing it on the load generator's event loop would delay the timestamps
of every stream. The child shares CLOCK_MONOTONIC with its parent, so its
sample times are on the run's time axis. It appends to the run's
server_metrics.jsonl between the parent's "before" and "after" lines.

The child ends when its stdin closes: the parent closes it to stop the
scrapes, and the kernel closes it when the parent dies, however it dies, so
no scraper outlives its run. Group signals (Ctrl-C, ``systemctl stop``) are
ignored: the parent decides when scraping ends.

On the same ticks it samples the server host's GPUs (``--gpu``: 'nvml' or a DCGM
exporter's URL, see ``gpu.py``) into gpu_metrics.jsonl. NVML's reason for being
unavailable does not change during a run, so it is written once and the GPU
sampling stops; a DCGM exporter that fails is a gap on that tick only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, TYPE_CHECKING

from specguard.lifetime import ignore_interrupts, set_cpus, yield_cpu
from specguard.results.models import MetricsSample
from specguard.server_metrics.gpu import GpuSampler, NvmlSampler, gpu_sampler
from specguard.server_metrics.parse import MetricsParseError, parse_metrics_text

if TYPE_CHECKING:  # the child scrapes with urllib: aiohttp cost its start 0.3 s of imports, on every run
    import aiohttp


def _gap(t: float, phase: str, exc: BaseException) -> MetricsSample:
    # Why the ignore below: phase is one of the callers' names, which MetricsSample validates
    return MetricsSample(t_s=t, phase=phase, ok=False, error=f"{type(exc).__name__}: {exc}")  # type: ignore[arg-type]


async def fetch_page(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    """One GET of a ``/metrics`` page, bounded by ``timeout_s``: its text; MetricsParseError on a status other than 200.

    The one reader of a page over aiohttp: this run's scrapes and the canary's (``canary.evidence.scrape``).
    """
    async with asyncio.timeout(timeout_s):
        async with session.get(url) as resp:
            text = await resp.text(errors="replace")
            if resp.status != 200:
                raise MetricsParseError(f"HTTP {resp.status}")
    return text


async def scrape_once(session: aiohttp.ClientSession, url: str, t0: float, phase: str, timeout_s: float = 5.0) -> MetricsSample:
    import aiohttp  # loaded already in the parent, which alone calls this

    t = time.monotonic() - t0
    try:
        return parse_metrics_text(await fetch_page(session, url, timeout_s), t, phase)
    except (aiohttp.ClientError, OSError, TimeoutError, MetricsParseError) as exc:
        return _gap(t, phase, exc)


def scrape_blocking(url: str, t0: float, phase: str, timeout_s: float = 5.0) -> MetricsSample:
    t = time.monotonic() - t0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read().decode("utf-8", errors="replace")
        return parse_metrics_text(text, t, phase)
    except (urllib.error.URLError, OSError, TimeoutError, MetricsParseError) as exc:
        return _gap(t, phase, exc)


class ScraperProcess:
    """The periodic "during" scrapes, in a child process writing to ``out``.

    The child is started and has finished its imports (a second of CPU)
    before the run's traffic starts; it is then given the run's time origin.
    """

    def __init__(
        self,
        url: str | None,
        interval_s: float,
        out: Path,
        cpus: set[int] | None = None,
        gpu: str | None = None,
        gpu_out: Path | None = None,
    ) -> None:
        """``url`` None: no /metrics scrapes; ``gpu`` ('nvml' or a DCGM exporter URL) with ``gpu_out``: GPU samples."""
        self.argv = [sys.executable, "-m", "specguard.server_metrics.scraper", "--interval", repr(interval_s)]
        self.argv += ["--url", url, "--out", str(out)] if url else []
        self.argv += ["--gpu", gpu, "--gpu-out", str(gpu_out)] if gpu and gpu_out else []
        self.proc: subprocess.Popen[bytes] | None = None
        self.cpus = cpus

    def launch(self) -> None:
        """Start the child and wait until it is ready (blocking: call before the run starts)."""
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=(lambda: set_cpus(self.cpus)) if self.cpus else None,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("the /metrics scraper process did not start")

    def begin(self, t0: float) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"{t0!r}\n".encode())
        self.proc.stdin.flush()

    def stop(self) -> None:
        """Close the child's stdin (its signal to stop) and wait for it; a scrape under way ends within its timeout."""
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _main() -> None:
    p = argparse.ArgumentParser(description="specguard's periodic /metrics scraper (started by specguard bench)")
    p.add_argument("--url")
    p.add_argument("--interval", type=float, required=True)
    p.add_argument("--out", type=Path)
    p.add_argument("--gpu", help="'nvml' or a DCGM exporter's metrics URL")
    p.add_argument("--gpu-out", type=Path)
    a = p.parse_args()
    ignore_interrupts()
    # Yield the CPU to the load generator, whose timestamps are the measurement.
    yield_cpu()
    # NVML is opened before "ready": nvmlInit takes tens of milliseconds with a driver, kept out of the run.
    gpu = gpu_sampler(a.gpu) if a.gpu and a.gpu_out else None
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        return
    t0 = float(line)
    stop = threading.Event()

    def watch_parent() -> None:
        sys.stdin.read()  # returns at EOF: the parent closed the pipe, or died
        stop.set()

    threading.Thread(target=watch_parent, daemon=True).start()
    metrics_fh = a.out.open("a", encoding="utf-8") if a.url and a.out else None
    gpu_fh = a.gpu_out.open("a", encoding="utf-8") if gpu is not None else None
    tick = time.monotonic()
    while not stop.wait(max(0.0, tick + a.interval - time.monotonic())):
        tick += a.interval
        if metrics_fh is not None:
            _write(metrics_fh, scrape_blocking(a.url, t0, "during").model_dump_json())
        if gpu is not None and gpu_fh is not None:
            gpu = _sample_gpu(gpu, gpu_fh, t0)
    if gpu is not None:
        gpu.close()


def _sample_gpu(gpu: GpuSampler, fh: IO[str], t0: float) -> GpuSampler | None:
    """One GPU sample written; the sampler to use next tick, None once NVML has said it cannot be used."""
    _write(fh, gpu.read(t0, "during").model_dump_json())
    if isinstance(gpu, NvmlSampler) and gpu.unavailable is not None:
        return None
    return gpu


def _write(fh: IO[str], line: str) -> None:
    try:
        fh.write(line + "\n")
        fh.flush()
    except OSError:
        os._exit(3)  # disk full or directory gone: the run reports it once, from the record writer or itself


if __name__ == "__main__":
    _main()
