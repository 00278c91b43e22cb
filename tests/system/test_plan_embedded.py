"""Gate 3 predictions against what the real embedded vLLM reports, without and with a draft model."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specguard.embedded.models import ModelSet
from specguard.embedded.runtime import VllmRuntime
from specguard.embedded.servers import embedded_server, embedded_spec
from specguard.vllm.process import ManagedServer

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def draft_server(runtime: VllmRuntime, models: ModelSet, vllm_logs: Path) -> Iterator[ManagedServer]:
    """A draft-model server, only for this module: it is the one place a third server is needed."""
    server = embedded_server(runtime, embedded_spec(models, "draft_model"), "draft_model", vllm_logs)
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _plan(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "plan", *args, "--json"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("kind", ["baseline", "ngram"])
def test_prediction_equals_server_blocks_without_draft(
    kind: str, vllm_servers: dict[str, ManagedServer], models: ModelSet
) -> None:
    method = ["--method", "ngram"] if kind == "ngram" else []
    report = _plan(
        "--target",
        str(models.path("target")),
        *method,
        "--url",
        vllm_servers[kind].base_url,
        "--prompt-len",
        "64",
        "--output-len",
        "128",
    )
    cmp = report["server_comparison"]
    assert cmp["side"] == ("speculative" if kind == "ngram" else "baseline")
    assert cmp["predicted_blocks"] == cmp["server_blocks"] and cmp["error_percent"] == 0
    assert report["speculative"]["kv_tokens"] == report["baseline"]["kv_tokens"]  # n-gram holds no KV


def test_prediction_equals_server_blocks_with_a_draft_model(
    draft_server: ManagedServer, vllm_servers: dict[str, ManagedServer], models: ModelSet
) -> None:
    report = _plan(
        "--target",
        str(models.path("target")),
        "--draft",
        str(models.path("draft")),
        "--num-speculative-tokens",
        "3",
        "--url",
        draft_server.base_url,
        "--prompt-len",
        "64",
        "--output-len",
        "128",
    )
    cmp = report["server_comparison"]
    assert cmp["side"] == "speculative"
    assert cmp["predicted_blocks"] == cmp["server_blocks"], cmp
    # the draft's layer shares the pool: fewer blocks than the baseline server has
    base = _plan("--target", str(models.path("target")), "--url", vllm_servers["baseline"].base_url)
    assert cmp["server_blocks"] < base["server_comparison"]["server_blocks"]
    assert report["headroom_lost_percent"] > 0
    assert report["config"] == {"method": "draft_model", "model": str(models.path("draft")), "num_speculative_tokens": 3}
