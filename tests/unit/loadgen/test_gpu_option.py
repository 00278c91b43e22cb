"""--gpu-metrics-url is checked at the edge, named as typed, before anything is sent or written."""

from __future__ import annotations

import pytest

from specguard.errors import OptionError
from specguard.loadgen.request import BENCH_OPTIONS, BenchRequest
from specguard.validation import options


def _request(gpu_metrics_url: str | None) -> BenchRequest:
    """As the command line builds it (cli/app.py's bench)."""
    values = {"base_url": "http://127.0.0.1:8000", "model": "m", "prompts": "synthetic:random", "out": "runs/x"}
    return options(BenchRequest, {**values, "num_requests": 2, "gpu_metrics_url": gpu_metrics_url}, BENCH_OPTIONS)


def test_a_url_none_and_unset_are_accepted() -> None:
    for value in ("http://10.0.0.7:9400/metrics", "none", None):
        assert _request(value).gpu_metrics_url == value


def test_anything_else_names_the_option() -> None:
    with pytest.raises(OptionError, match=r"^--gpu-metrics-url ftp://x: expected http\(s\)://host\[:port\]"):
        _request("ftp://x")
