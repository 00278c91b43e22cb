"""Issue 26 point 5: a window's analysis does not delay the streams the proxy relays.

Two runs in this test over the same scripted pools and the same load: one whose windows carry a heavy analysis
(every latency metric, 5,000 bootstrap resamples: 0.3 s and more of work per window on these cores, the lag the
issue measured when it ran on the relay loop), and a control whose windows judge the error rate only (no
bootstrap). Each run compares the proxy's own record of when it relayed each chunk (``chunk_times_s``, the
inter-chunk gaps an ITL is made of) with the servers' own record of when they wrote them (``chunks.jsonl``),
at p99.9 over the ~10,000 gaps of a run. The analysis runs off the relay loop (a worker thread): the heavy run's
excess over the servers must stay within a few ms of the control's. The bound is relative to the control on
purpose: two shared CI cores move both runs' tails alike, and only what the analysis adds is under test.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from tests.canary_harness import TOKEN, TOKEN_ENV, CanaryRun, drive, running, user_keys, write_rollout

STREAM = {"ttft_ms": 10.0, "interval_ms": 10.0, "chunks": 40}  # 0.4 s streams, a chunk every 10 ms
HEAVY = [
    {"metric": "itl_ms", "percentile": "p99", "budget": 0.10},
    {"metric": "e2e_ms", "percentile": "p99", "budget": 0.10},
    {"metric": "ttft_ms", "percentile": "p99", "budget": 0.10},
    {"metric": "error_rate", "budget": 0.005},
]
LIGHT = [{"metric": "error_rate", "budget": 0.005}]
# What "a few ms" is: the p99.9 excess of the heavy run over the control's. On the loop (before issue 26) it was
# 190 to 310 ms (229-352 ms p99.9 against the servers' 38-45 ms). 20 ms, not 5: the tail of ~10,000 gaps is its
# ~10 largest, which a busy machine moves between identical runs, and a bound inside that noise fails by chance;
# the defect it guards against is ten times larger. Measured with the judge off the loop, on 2 cores shared with
# four other test runs: excess 33 and 63 ms in the heavy runs, 55 and 108 ms in the controls (noise, not the judge).
FEW_MS = 20.0


@pytest.fixture(autouse=True)
def _admin_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def p999_ms(gaps: list[float]) -> float:
    return float(np.quantile(np.asarray(gaps), 0.999)) * 1000.0


async def excess_over_servers(scripted, tmp_path: Path, metrics: list[dict[str, object]], resamples: int) -> tuple[float, float]:
    """(proxy p99.9 gap, servers' p99.9 gap) in ms over one run of 6 s at 24 streams."""
    tmp_path.mkdir()
    pools = {"baseline": scripted(**STREAM, seed=1), "candidate": scripted(**STREAM, seed=2)}
    rollout = write_rollout(
        tmp_path,
        {name: [p.base_url] for name, p in pools.items()},
        steps=[{"percent": 50, "min_time_s": 3600, "min_requests": 10**6}, {"percent": 100}],
        analysis={"window_s": 1.0, "metrics": metrics, "min_samples": 20, "resamples": resamples, "min_power": 0.0},
    )
    async with running(CanaryRun(rollout, tmp_path / "logs", exit_when_finished=False)) as run:
        stop = asyncio.Event()
        load = asyncio.ensure_future(
            drive(run.url, requests=100_000, concurrency=24, keys=user_keys(500), stop=stop, max_tokens=40)
        )
        await asyncio.sleep(6.0)
        stop.set()
        assert (await load).failed == 0
        windows = len(run.events("window"))
        await run.stopped()
    print(f"windows judged: {windows}")
    assert windows >= 2, "the analysis ran while the streams were relayed"
    with run.store() as store:
        records = store.requests()
    proxy = [g for r in records if r.ok for g in np.diff(r.chunk_times_s).tolist()]
    servers = [g for p in pools.values() for log in p.chunk_logs().values() for g in np.diff(log.chunk_sent).tolist()]
    assert len(proxy) > 5000 and len(servers) > 5000
    return p999_ms(proxy), p999_ms(servers)


async def test_a_windows_analysis_does_not_move_the_proxys_p99_9_inter_chunk_gap(
    scripted, tmp_path: Path, record_property
) -> None:
    heavy_proxy, heavy_servers = await excess_over_servers(scripted, tmp_path / "heavy", HEAVY, 5_000)
    light_proxy, light_servers = await excess_over_servers(scripted, tmp_path / "light", LIGHT, 100)
    heavy, light = heavy_proxy - heavy_servers, light_proxy - light_servers
    record_property("p999_excess_ms", {"heavy": heavy, "light": light})
    print(f"p99.9 gap: heavy {heavy_proxy:.1f} vs servers {heavy_servers:.1f}; light {light_proxy:.1f} vs {light_servers:.1f}")
    assert heavy - light <= FEW_MS, (heavy, light)
