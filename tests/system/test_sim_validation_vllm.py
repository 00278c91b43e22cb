"""The simulator predicts the embedded vLLM at loads it was not calibrated on (docs/validation.md, section 1).

A profile is calibrated on real baseline and n-gram runs at concurrency 1 and 4, then the runs at concurrency 2
and Poisson 6 req/s on both servers are predicted from it and measured (``INTEGRATION_LOADS``, calibration and
predicted runs alternating in time). Bound: each predicted run's p50 TPOT and p50 E2E within a factor of 2.5 of
the measurement (predicted / measured in [1/2.5, 2.5]). Why that wide: on this shared 2-vCPU machine one load
measured twice on one server, minutes apart, moved by up to 41 % (baseline, concurrency 1: 5.9 then 8.3 ms per
token; n-gram by 33 % in docs/validation.md's noise-floor rows), and a prediction carries the noise of its
calibration runs and of the run it predicts: in three full runs the errors reached -35 % and +59 % (baseline,
concurrency 2, TPOT, in a CI run that failed a first bound of 50 %), and in a full run of 2026-12-04 +102 %
(n-gram, Poisson 6 req/s, TPOT, at 96 % of the vLLM tests: the same test passed alone minutes later), which
failed a bound of 2. A model error such as a missed warm-up
(+243 % when written, a factor 3.4) or an ignored speculation (n-gram: about 3x) is outside it.
TTFT and the p90s are shown in docs/validation.md, not bounded here: the API server's own time per request is
not in the engine model, and a CPU server's TTFT under concurrency came out up to 67 % under.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.embedded.servers import SERVED_NAME
from specguard.loadgen.runner import run_async, run_bench
from specguard.sim.validation import INTEGRATION_LOADS, WARM_UP, bench_config, validate_embedded

pytestmark = pytest.mark.vllm
FACTOR = 2.5


def test_predictions_of_unseen_loads_are_within_the_stated_bound(vllm_servers, tmp_path: Path) -> None:
    for name, server in vllm_servers.items():  # compiled for every batch shape first (validation.WARM_UP)
        run_async(run_bench(bench_config(WARM_UP, server.base_url, SERVED_NAME, tmp_path / f"warm_up-{name}")))
    runs = []
    for load in INTEGRATION_LOADS:
        server = vllm_servers[load.server]
        run_async(run_bench(bench_config(load, server.base_url, SERVED_NAME, tmp_path / load.name)))
        runs.append((load, tmp_path / load.name))
    result = validate_embedded(runs)
    assert [r.load.name for r in result.runs] == [x.name for x in INTEGRATION_LOADS if x.role == "predict"]
    assert len(result.runs) == 4 and result.calibration_runs == ["base_c1", "base_c4", "ngram_c1", "ngram_c4"]
    assert result.profile.fixed_s > 0 and result.profile.per_batched_token_s > 0
    for r in result.runs:
        errors = {(p.metric, p.stat): p.error for p in r.prediction.points}
        for key in (("tpot_ms", "p50"), ("e2e_ms", "p50")):
            err = errors[key]
            assert err is not None and 1 / FACTOR <= 1 + err <= FACTOR, (r.load.name, key, errors)
        if r.method == "ngram":  # the speculative arm was simulated with the run's own acceptance
            accepted = r.prediction.predicted.mean_accepted_length
            assert accepted is not None and accepted > 1.5
