"""The Gateway API engine's ``kubectl apply``, with a scripted fake ``kubectl`` that fails (fault injection: no
cluster here to make a real kubectl fail on): its failure is reported with its words and the route files are kept.

The system tier (the fake kubectl runs as a process); the rendered routes and the missing-kubectl error are in
tests/unit/canary/test_gateway_api.py, whose engine builder this test shares.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from specguard.canary.routers.gateway_api import GatewayApiRouter
from specguard.errors import RuntimeFailure
from tests.unit.canary.test_gateway_api import engine


async def test_a_failing_kubectl_is_reported_with_its_words_and_the_files_are_kept(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"  # a scripted fake: no cluster here to make a real kubectl fail on
    fake.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/argv"\necho "error: the server could not be reached" >&2\nexit 1\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "routes"
    driver = GatewayApiRouter(engine(apply=True, out_dir=str(out)), "r", env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})
    with pytest.raises(RuntimeFailure, match="exited with 1: error: the server could not be reached"):
        await driver.set_weights(0.01, 0.0, 0)
    step_file = driver.written[-1].step
    assert step_file.exists() and (bin_dir / "argv").read_text().split() == ["apply", "-f", str(step_file)]
