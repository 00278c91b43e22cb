"""The one test of "is this server specguard's simulated engine": its /version's local tag, as run.json records it."""

from __future__ import annotations

import pytest

from specguard.simulated import IMITATED_VLLM, SIM_VERSION, is_simulated_version
from specguard.vllm.knowledge import parse_version


@pytest.mark.parametrize(
    ("version", "simulated"),
    [
        (SIM_VERSION, True),
        ("0.11.0+specguard.sim", True),
        ("0.32.0", False),
        ("0.32.0+cpu", False),
        ("0.32.0+specguard.simulator", False),
        ("specguard.sim", False),
        ("", False),
        (None, False),
    ],
)
def test_only_the_sim_tag_at_the_end_marks_a_simulated_server(version: str | None, simulated: bool) -> None:
    assert is_simulated_version(version) is simulated


def test_the_simulated_version_parses_as_the_release_it_imitates() -> None:
    # version-keyed rules (metric names, flags) see the imitated release, not an unknown one
    assert parse_version(SIM_VERSION) == parse_version(IMITATED_VLLM)
