"""Ratios read as ratios, and a change in words only within what it can mean: never "-1197516 %"."""

from __future__ import annotations

import math
import re

from specguard.analysis.ab_statistics import RatioResult
from specguard.number_format import fmt_change, fmt_ratio, fmt_ratio_ci
from specguard.verdict import CellComparison
from specguard.verdict.decide import cell_line


def ratio(r: float, lo: float, hi: float, b: float = 10.0) -> RatioResult:
    return RatioResult(
        baseline=b,
        candidate=b * r,
        ratio=r,
        ci_low=lo,
        ci_high=hi,
        n_baseline=500,
        n_candidate=500,
        enough_samples=True,
        more_requests_needed=0,
        mann_whitney_p=None,
        prob_candidate_lower=None,
        repetition_spread_widened=False,
    )


def cell(objective: RatioResult) -> CellComparison:
    r = ratio(1.0, 0.9, 1.1)
    return CellComparison(
        traffic="steady",
        offered_load=4,
        target=True,
        sampling="greedy",
        segment="chat",
        objective=objective,
        p99_e2e=r,
        p99_ttft=r,
        error_rate_baseline=0.0,
        error_rate_candidate=0.0,
    )


def test_a_ratio_and_its_interval_read_as_ratios():
    assert fmt_ratio_ci(0.71, 0.62, 0.80) == "x0.71, 95 % CI x0.62 to x0.80"
    assert fmt_ratio(12.34) == "x12.3" and fmt_ratio(11976.4) == "x11976" and fmt_ratio(math.inf) == "x∞"
    assert fmt_ratio(None) == fmt_ratio(math.nan) == "-"


def test_a_change_in_words_is_clipped_to_what_it_can_mean():
    assert fmt_change(0.71) == "29.0 % lower" and fmt_change(1.15) == "15.0 % higher"
    assert fmt_change(0.0) == "100.0 % lower"  # a reduction can reach 100 %, never more
    assert fmt_change(11976.0) == "11976 times higher" and fmt_change(1.0) == "no change"


def test_the_cell_line_of_a_wide_interval_prints_no_impossible_percentage():
    """The objective once printed "(-1197516 %)" for an interval reaching x11976: now it is a ratio."""
    line = cell_line(cell(ratio(0.8, 0.5, 11976.16)), "p95 itl_ms", higher=False)
    assert "x0.80, 95 % CI x0.50 to x11976" in line.text and "20.0 % lower" in line.text
    percents = [float(p) for p in re.findall(r"([-+]?[\d.]+) ?%", line.text.replace("95 % CI", ""))]
    assert percents and all(-100 <= p <= 100 for p in percents), line.text
