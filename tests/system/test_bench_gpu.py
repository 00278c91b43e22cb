"""specguard bench records the server host's GPUs: from a scripted DCGM exporter, or "not available" with the reason."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.results.models import GpuSample, LoadShape, Summary
from specguard.results.run_dir import RunDir
from specguard.results.store import read_jsonl
from tests.unit.server_metrics.test_gpu import DCGM_PAGE

FAST = {"ttft_ms": 5, "interval_ms": 20, "chunks": 10}


@contextmanager
def dcgm_page() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = DCGM_PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def _bench(server, out: Path, gpu_metrics_url: str | None) -> Summary:
    cfg = BenchConfig(
        base_url=server.base_url,
        model="scripted",
        prompts=synthetic_prompts("random", count=4),
        load=LoadShape(kind="concurrency", concurrency=1, num_requests=6),
        metrics_url=None,
        gpu_metrics_url=gpu_metrics_url,
        scrape_interval_s=0.1,
        out_dir=out,
    )
    return run_async(run_bench(cfg))


def test_a_dcgm_exporters_values_reach_the_run_and_its_summary(scripted, tmp_path):
    server = scripted(**FAST)
    with dcgm_page() as url:
        summary = _bench(server, tmp_path / "run", url)
    samples = read_jsonl(tmp_path / "run" / RunDir.GPU_METRICS, GpuSample)
    assert samples and all(s.ok and s.source == "dcgm" for s in samples)
    assert summary.gpu is not None and summary.gpu.available and summary.gpu.samples == len(samples)
    first, second = summary.gpu.gpus
    assert (first.utilization_mean_pct, first.memory_used_max_mib, first.power_mean_w, first.sm_clock_mean_mhz) == (
        87,
        77000,
        612.5,
        1980,
    )
    assert second.utilization_max_pct == 12 and summary.errors == 0


def test_gpu_sampling_that_cannot_read_a_gpu_never_fails_the_run(scripted, tmp_path):
    server = scripted(**FAST)
    summary = _bench(server, tmp_path / "run", None)  # loopback: NVML, which this host may or may not have
    assert summary.errors == 0 and summary.gpu is not None
    if not summary.gpu.available:
        assert summary.gpu.reason and summary.gpu.reason.startswith("NVML not available")
        assert f"GPU figures not available: {summary.gpu.reason}" in summary.notes
    off = _bench(server, tmp_path / "off", "none")
    assert off.gpu is None and not (tmp_path / "off" / RunDir.GPU_METRICS).exists()
