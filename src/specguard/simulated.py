"""How specguard tells the simulated server from a real one: its version's local tag, and what reports say.

``sim serve`` answers /version with ``0.32.0+specguard.sim``: it parses as the vLLM release it imitates (so
version-keyed rules still apply) and ``bench`` records it in run.json's ``server_version``, which is where every
report built on its runs learns that its numbers are simulated. Kept free of the engine's imports so that the
report and check packages can read it cheaply.
"""

from __future__ import annotations

SIM_HEADER = "X-Specguard-Simulated"
IMITATED_VLLM = "0.32.0"  # the release whose metric names and bucket bounds serve_metrics copies
SIM_VERSION_TAG = "+specguard.sim"
SIM_VERSION = IMITATED_VLLM + SIM_VERSION_TAG
SIMULATED_SERVER_BANNER = "SIMULATED: numbers come from specguard's simulated engine, not from a real vLLM server"
SIMULATED_NOTE = "Use it to learn the tool, never as evidence about a deployment."


def is_simulated_version(server_version: str | None) -> bool:
    """Whether a server's /version (as run.json records it) is specguard's simulated engine."""
    return server_version is not None and server_version.strip().endswith(SIM_VERSION_TAG)
