"""The simulator predicts the embedded vLLM at loads it was not calibrated on (docs/validation.md, section 1).

A profile is calibrated on real baseline and n-gram runs at concurrency 1 and 4 (``CALIBRATION_LOADS``), then
each of ``PREDICTED_LOADS`` (concurrency 2 and Poisson 6 req/s, on both servers) is predicted from it and
measured. Bound: each run's p50 TPOT and p50 E2E within 35 % of the measurement. When written, on 2 cores, the
errors were -1 % to -13 % (TPOT) and -2 % to -15 % (E2E); TTFT and the p90s are shown in docs/validation.md,
not bounded here: a CPU server's TTFT at concurrency runs up to -45 % (the API server's own time per request
is not in the engine model).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.embedded.servers import SERVED_NAME
from specguard.loadgen.runner import run_async, run_bench
from specguard.sim.validation import CALIBRATION_LOADS, PREDICTED_LOADS, WARM_UP, bench_config, validate_embedded

pytestmark = pytest.mark.vllm
BOUND = 0.35


def test_predictions_of_unseen_loads_are_within_the_stated_bound(vllm_servers, tmp_path: Path) -> None:
    for name, server in vllm_servers.items():  # compiled for every batch shape first (validation.WARM_UP)
        run_async(run_bench(bench_config(WARM_UP, server.base_url, SERVED_NAME, tmp_path / f"warm_up-{name}")))
    runs = []
    for load in (*CALIBRATION_LOADS, *PREDICTED_LOADS):
        server = vllm_servers[load.server]
        run_async(run_bench(bench_config(load, server.base_url, SERVED_NAME, tmp_path / load.name)))
        runs.append((load, tmp_path / load.name))
    result = validate_embedded(runs)
    assert [r.load.name for r in result.runs] == [load.name for load in PREDICTED_LOADS]
    assert result.profile.fixed_s > 0 and result.profile.per_batched_token_s > 0
    for r in result.runs:
        errors = {(p.metric, p.stat): p.error for p in r.prediction.points}
        for key in (("tpot_ms", "p50"), ("e2e_ms", "p50")):
            assert errors[key] is not None and abs(errors[key]) <= BOUND, (r.load.name, key, errors)
        if r.method == "ngram":  # the speculative arm was simulated with the run's own acceptance
            assert r.prediction.predicted.mean_accepted_length is not None and r.prediction.predicted.mean_accepted_length > 1.5
