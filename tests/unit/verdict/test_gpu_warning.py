"""The verdict's warnings name a candidate that ran its GPUs busier for the same throughput."""

from __future__ import annotations

from specguard.analysis.ab_statistics import RatioResult
from specguard.check.plan import Guardrails, Objective
from specguard.verdict import CellComparison, decide
from specguard.verdict.decide import cell_warnings


def _rr(ratio: float) -> RatioResult:
    return RatioResult(
        baseline=10.0,
        candidate=10.0 * ratio,
        ratio=ratio,
        ci_low=ratio - 0.05,
        ci_high=ratio + 0.05,
        n_baseline=1000,
        n_candidate=1000,
        enough_samples=True,
        more_requests_needed=0,
        mann_whitney_p=0.01,
        prob_candidate_lower=0.6,
        repetition_spread_widened=False,
    )


def _cell(util: tuple[float | None, float | None], tokens_per_s: tuple[float, float]) -> CellComparison:
    return CellComparison(
        traffic="steady",
        offered_load=2.0,
        target=True,
        sampling="prod",
        segment="chat",
        objective=_rr(0.7),
        p99_e2e=_rr(1.0),
        p99_ttft=_rr(1.0),
        error_rate_baseline=0.0,
        error_rate_candidate=0.0,
        gpu_util_baseline=util[0],
        gpu_util_candidate=util[1],
        tokens_per_s_baseline=tokens_per_s[0],
        tokens_per_s_candidate=tokens_per_s[1],
    )


def test_a_busier_gpu_for_the_same_throughput_is_a_warning_that_leaves_the_verdict_alone() -> None:
    busier = _cell((45.0, 70.0), (300.0, 305.0))
    (line,) = [w for w in cell_warnings(busier) if "GPU" in w]
    assert line.startswith("steady / prod / chat: ") and "45 % -> 70 %" in line
    v = decide([busier], Objective(), Guardrails(), [])
    assert v.verdict == "GO" and line in v.warnings


def test_no_warning_without_gpu_figures_or_when_the_throughput_differs() -> None:
    assert not [w for w in cell_warnings(_cell((None, None), (300.0, 300.0))) if "GPU" in w]
    assert not [w for w in cell_warnings(_cell((45.0, 70.0), (300.0, 400.0))) if "GPU" in w]
