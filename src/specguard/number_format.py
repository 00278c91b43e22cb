"""The one number formatter of every report: fixed digits, and one rule for missing numbers.

A number that is missing (None) or undefined (NaN, as a ratio over an empty
arm is) prints as "-", never as "nan", so that no table shows a number that is not one.

Ratios are shown as ratios ("x0.71, 95 % CI x0.62 to x0.80"), and a change in words only
within what it can mean: a reduction is at most 100 %, and a rise beyond x10 is given as
"N times", because "1 - ratio" of a wide interval once printed as "-1197516 %".
"""

from __future__ import annotations

import math

__all__ = [
    "MISSING",
    "fmt",
    "fmt_change",
    "fmt_percent",
    "fmt_range",
    "fmt_ratio",
    "fmt_ratio_ci",
    "fmt_samples",
    "fmt_share",
]

MISSING = "-"
LARGE_RATIO = 10.0  # from here on a rise reads better as "N times" than as "+900 %"


def fmt(x: float | None, digits: int = 2) -> str:
    return MISSING if x is None or math.isnan(x) else f"{x:.{digits}f}"


def fmt_range(lo: float | None, hi: float | None, digits: int = 2, sep: str = "-") -> str:
    return f"{fmt(lo, digits)}{sep}{fmt(hi, digits)}"


def fmt_percent(x: float | None, digits: int = 1, unit: str = " %", signed: bool = False) -> str:
    """A fraction as a percentage: 0.031 -> "3.1 %" (``unit="%"`` for the compact "3.1%"; ``signed``: "+3.1 %")."""
    return MISSING if x is None or math.isnan(x) else f"{100 * x:{'+' if signed else ''}.{digits}f}{unit}"


def fmt_share(part: int, whole: int) -> str:
    """A count of a whole with its share: "3 of 40 (7.5 %)"; "none compared" for an empty whole."""
    return f"{part} of {whole} ({fmt_percent(part / whole)})" if whole else "none compared"


def fmt_samples(enough: bool, more_requests_needed: int) -> str:
    """Whether a percentile had enough samples, or how many more requests per arm it needs."""
    return "ok" if enough else f"too few (+{more_requests_needed})"


def fmt_ratio(x: float | None) -> str:
    """A ratio candidate / baseline: x0.71; fewer decimals as it grows (x12.3, x1198), x∞ for no upper bound."""
    if x is None or math.isnan(x):
        return MISSING
    if math.isinf(x):
        return "x∞" if x > 0 else MISSING
    digits = 2 if abs(x) < LARGE_RATIO else 1 if abs(x) < 100 else 0
    return f"x{x:.{digits}f}"


def fmt_ratio_ci(ratio: float | None, lo: float | None, hi: float | None, level: str = "95 %") -> str:
    """A ratio with its interval: "x0.71, 95 % CI x0.62 to x0.80"."""
    return f"{fmt_ratio(ratio)}, {level} CI {fmt_ratio(lo)} to {fmt_ratio(hi)}"


def fmt_change(ratio: float | None) -> str:
    """What a ratio means in words, clipped to what it can mean: "29 % lower", "15 % higher", "12 times higher"."""
    if ratio is None or math.isnan(ratio) or ratio < 0:
        return MISSING
    if math.isinf(ratio):
        return "unbounded"
    if ratio >= LARGE_RATIO:
        return f"{ratio:.0f} times higher"
    change = ratio - 1
    if round(abs(change) * 100, 1) == 0:
        return "no change"
    return f"{abs(change):.1%} {'higher' if change > 0 else 'lower'}".replace("%", " %")
