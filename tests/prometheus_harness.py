"""The real Prometheus in a test: started by the test as a child process, scraping given targets every second.

Its configuration and its TSDB are in the test's directory, it listens on a free loopback port, and it is
ready when ``/-/ready`` answers 200. ``ManagedServer`` starts it in its own process group with
PR_SET_PDEATHSIG and stops the group (the same as the vLLM and HAProxy children), so it never outlives the
test. The scrape jobs label each pool's servers with ``specguard_pool``, as the operator's configuration
does in the header of ``specguard canary observability``'s files.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from specguard.canary.observability.conventions import POOL_LABEL
from specguard.server_metrics.prometheus_api import PrometheusApi
from specguard.vllm.process import ManagedServer
from specguard.vllm.server_spec import ServerSpec

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SCRAPE_INTERVAL_S = 1.0


def pool_jobs(pools: dict[str, list[str]], *, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One scrape job per pool over its servers' base URLs, each target labelled with its pool."""
    jobs: list[dict[str, Any]] = []
    for pool, urls in pools.items():
        targets = [urlsplit(u).netloc for u in urls]
        jobs.append({"job_name": f"vllm-{pool}", "static_configs": [{"targets": targets, "labels": {POOL_LABEL: pool}}]})
    return jobs + (extra or [])


class PrometheusProcess(ManagedServer):
    def __init__(self, log_dir: Path, jobs: list[dict[str, Any]], rule_files: list[Path] | None = None) -> None:
        super().__init__(
            ServerSpec(model="prometheus", served_model_name="prometheus"), [], log_dir / "prometheus.log", startup_timeout_s=60
        )
        self.dir = log_dir
        self.config = log_dir / "prometheus.yml"
        self.doc: dict[str, Any] = {
            "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S:g}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S:g}s"},
            "rule_files": [str(p) for p in rule_files or []],
            "scrape_configs": jobs,
        }

    @property
    def url(self) -> str:
        return self.base_url

    def command(self, port: int) -> list[str]:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(yaml.safe_dump(self.doc, sort_keys=False))
        return [
            PROMETHEUS,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.dir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False


async def send_streams(
    url: str, n: int, *, max_tokens: int, concurrency: int = 4, model: str = "specguard-tiny", users: bool = False
) -> int:
    """``n`` streamed completions of exactly ``max_tokens`` tokens (``ignore_eos``); how many ended with [DONE].

    A repetitive prompt at temperature 0, so that an n-gram server finds drafts to propose and accept.
    ``users`` gives each request its own ``user`` (the canary proxy's sticky key), so a split spreads them.
    """
    import asyncio

    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    done = 0

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        nonlocal done
        body: dict[str, Any] = {
            "model": model,
            "prompt": "one two three four one two three four one two three four one two",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
        }
        if users:
            body["user"] = f"user-{i}"
        async with sem, session.post(f"{url}/v1/completions", json=body) as resp:
            text = await resp.read()
            assert resp.status == 200, text[-300:]
            done += text.rstrip().endswith(b"data: [DONE]")

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        await asyncio.gather(*(one(session, i) for i in range(n)))
    return done


async def wait_scraped(api: PrometheusApi, targets: int, timeout_s: float = 60.0) -> None:
    """Until ``targets`` targets are up and each was scraped at least three times (a bounded wait, not a measurement)."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout_s
    query = "count(count_over_time(up[1m]) >= 3 and up == 1)"
    while time.monotonic() < deadline:
        found = await api.instant(query)
        if found and found[0].points[0][1] >= targets:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"Prometheus did not scrape the {targets} targets within {timeout_s:g} s")
