"""The HAProxy engine in front of real vLLM CPU servers: the session's baseline, and its n-gram server as the
speculative pool, behind the real HAProxy 2.6 started by the test with the generated configuration.

Which server served a request is read at the servers, from vLLM's own ``vllm:request_success_total``; that a
stream was in flight on the speculative server when the rollback landed, from its ``vllm:num_requests_running``.
Kept short (300 requests of 4 tokens): the split check and the rollback check of the scripted-server tests.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specguard.canary.routers.haproxy import HAProxyRouter
from specguard.canary.spec.rollout import Rollout
from specguard.embedded.servers import SERVED_NAME
from specguard.server_metrics.parse import parse_metrics_text
from specguard.vllm.process import ManagedServer
from tests.haproxy_harness import HAProxyProcess, engine_of

pytestmark = pytest.mark.vllm

SIGMAS = 4.5
N = 300
CONCURRENCY = 8


def metrics(server: ManagedServer) -> tuple[float, float]:
    """(requests finished so far, requests running now) as the server's /metrics says."""
    import urllib.request

    with urllib.request.urlopen(server.metrics_url, timeout=10) as resp:
        sample = parse_metrics_text(resp.read().decode(), 0.0, "during")
    return sum(sample.finished_by_reason.values()), sample.gauges.get("requests_running", 0.0)


def finished_since(servers: dict[str, ManagedServer], before: dict[str, float], total: int) -> dict[str, float]:
    """Requests each server finished since ``before``, once they add up to ``total`` (vLLM counts a request as it
    finishes, a moment after its last byte left: a bounded wait, not a measurement)."""
    for _ in range(200):
        done = {pool: metrics(s)[0] - before[pool] for pool, s in servers.items()}
        if sum(done.values()) >= total:
            return done
        time.sleep(0.05)
    raise AssertionError(f"the servers finished {done} of {total} requests")


async def stream(session: aiohttp.ClientSession, url: str, max_tokens: int) -> bytes:
    body = {"model": SERVED_NAME, "prompt": "The quick brown fox", "max_tokens": max_tokens, "stream": True}
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.read()


async def many(url: str, n: int) -> None:
    sem = asyncio.Semaphore(CONCURRENCY)
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            async with sem:
                assert (await stream(session, url, 4)).rstrip().endswith(b"data: [DONE]")

        await asyncio.gather(*(one() for _ in range(n)))


def test_haproxy_split_and_rollback_in_front_of_vllm(vllm_servers: dict[str, Any], tmp_path: Path) -> None:
    servers: dict[str, ManagedServer] = {"baseline": vllm_servers["baseline"], "candidate": vllm_servers["ngram"]}
    with tempfile.TemporaryDirectory(prefix="sg-hap-") as sock_dir:
        rollout = Rollout.model_validate(
            {
                "engine": {
                    "type": "haproxy",
                    "socket": f"{sock_dir}/admin.sock",
                    "backend": "vllm",
                    "baseline_servers": ["baseline-1"],
                    "candidate_servers": ["ngram-1"],
                    "drain": True,
                },
                "pools": {pool: {"servers": [s.base_url]} for pool, s in servers.items()},
                "admin": {"token_env": "CANARY_TOKEN"},
            }
        )
        haproxy = HAProxyProcess(rollout, tmp_path / "haproxy")
        with haproxy:
            asyncio.run(split_then_rollback(HAProxyRouter(engine_of(rollout)), haproxy.base_url, servers))


async def split_then_rollback(driver: HAProxyRouter, url: str, servers: dict[str, ManagedServer]) -> None:
    # The split: weights set and read back, then counted at the servers.
    await driver.set_weights(0.25, 0.0, 0)
    states = await driver.read_back()
    assert {s: states[s].weight for s in driver.applied[-1].weights} == driver.applied[-1].weights
    share = driver.applied[-1].shares["candidate"]
    before = {pool: metrics(s)[0] for pool, s in servers.items()}
    await many(url, N)
    done = finished_since(servers, before, N)
    sigma = math.sqrt(N * share * (1 - share))
    assert abs(done["candidate"] - N * share) <= SIGMAS * sigma, (done, N * share)

    # The rollback: all traffic on the speculative server, one long stream started there, then weight 0 and drain.
    await driver.set_weights(1.0, 0.0, 1)
    async with aiohttp.ClientSession() as session:
        # 900 tokens (max_model_len is 1,024; 400 were over before the rollback landed) at temperature 1: little
        # for the n-gram proposer to match, about one token per step. At temperature 0 the n-gram server's
        # repetitive output was accepted in long runs and the stream was over before the rollback landed (CI).
        body = {
            "model": SERVED_NAME,
            "prompt": "Count:",
            "max_tokens": 900,
            "stream": True,
            "ignore_eos": True,
            "temperature": 1.0,
            "seed": 11,
        }
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            assert resp.status == 200
            first = await resp.content.readline()
            assert first.startswith(b"data: ")
            await driver.set_weights(0.0, 0.0, 2)
            # In flight is the server's word: the client's buffer may already hold more than it has read.
            before = {pool: metrics(s)[0] for pool, s in servers.items()}
            assert metrics(servers["candidate"])[1] >= 1, "the stream was still running on the speculative server"
            states = await driver.read_back()
            assert states["ngram-1"].weight == 0 and states["ngram-1"].draining
            await many(url, 40)
            rest = await resp.read()
    events = [e for e in (first + rest).split(b"\n\n") if e.strip()]
    assert events[-1] == b"data: [DONE]", "the stream in flight at the rollback finished"
    assert any(b'"finish_reason":"length"' in e for e in events), "... with all its tokens"
    done = finished_since(servers, before, 41)
    # The 40 new requests all went to the baseline; the speculative server finished only the long stream.
    assert (done["baseline"], done["candidate"]) == (40, 1), done
    await driver.close()
