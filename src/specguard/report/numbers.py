"""The one number formatter of every report: fixed digits, and one rule for missing numbers.

A number that is missing (None) or undefined (NaN, as a ratio over an empty
arm is) prints as "-", never as "nan", so that no table shows a number that is not one.
"""

from __future__ import annotations

import math

MISSING = "-"


def fmt(x: float | None, digits: int = 2) -> str:
    return MISSING if x is None or math.isnan(x) else f"{x:.{digits}f}"


def fmt_range(lo: float | None, hi: float | None, digits: int = 2, sep: str = "-") -> str:
    return f"{fmt(lo, digits)}{sep}{fmt(hi, digits)}"


def fmt_percent(x: float | None, digits: int = 1, unit: str = " %") -> str:
    """A fraction as a percentage: 0.031 -> "3.1 %" (``unit="%"`` for the compact "3.1%")."""
    return MISSING if x is None or math.isnan(x) else f"{100 * x:.{digits}f}{unit}"


def fmt_samples(enough: bool, more_requests_needed: int) -> str:
    """Whether a percentile had enough samples, or how many more requests per arm it needs."""
    return "ok" if enough else f"too few (+{more_requests_needed})"
