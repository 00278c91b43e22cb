"""vLLM version strings as pip reads them (PEP 440, via ``packaging``), mapped to the release the tables know."""

from __future__ import annotations

import pytest

from specguard.vllm import knowledge as K


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.32.0", (0, 32, 0)),
        ("0.32", (0, 32, 0)),
        (" 0.32.0\n", (0, 32, 0)),
        ("v0.11.0rc1", (0, 11, 0)),  # pre-release: the release it leads to
        ("0.11.0rc2.dev4", (0, 11, 0)),
        ("0.10.2.dev5+g1a2b3c4.d20250101", (0, 10, 2)),  # a source build: dev and local parts
        ("0.32.0+cpu", (0, 32, 0)),  # the CPU wheel's local version
        ("0.8.5.post1", (0, 8, 5)),  # post release: same tables as its release
        ("0.10.1.1", (0, 10, 1)),  # a fourth release number
        ("1!0.32.0", (0, 32, 0)),  # an epoch does not change the release
    ],
)
def test_pep440_forms_map_to_their_release(text: str, release: K.Version) -> None:
    assert K.parse_version(text) == release


@pytest.mark.parametrize("text", ["latest", "", "0.32.0 (cpu)", "main", "0.x"])
def test_non_versions_are_refused(text: str) -> None:
    with pytest.raises(K.VersionParseError, match="not a vLLM version"):
        K.parse_version(text)


def test_version_gates_compare_releases() -> None:
    # an rc of 0.22 already has the 0.22 surface, as the tables were read from its release
    assert K.surface_for(K.parse_version("0.22.0rc1")).spec_args
    assert not K.surface_for(K.parse_version("0.21.9.post2")).spec_args
