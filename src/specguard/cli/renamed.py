"""Options renamed so that one concept has one name across commands (issue 29); the old name is kept for a release.

The old spelling is a second, hidden option of the same command: it works, it is not in ``--help``, and using it
prints one warning naming the new one. Given both, the command refuses (exit 2) rather than pick one.
"""

from __future__ import annotations

from typing import TypeVar

from specguard.cli.output import err
from specguard.errors import OptionError

T = TypeVar("T")

# old -> new, per command: what the report and the docs list; the hidden options below use these names
RENAMED = {
    "bench": {"--base-url": "--url"},
    "assess": {"--target-model": "--target"},
    "embedded install": {"--version": "--vllm-version"},
    "preflight": {"--vllm": "--vllm-bin"},  # as canary units names the same thing
}


def renamed(new_value: T | None, old_value: T | None, new: str, old: str) -> T | None:
    """The value given under ``new``, or under its old name ``old`` (with a warning); not both."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise OptionError(f"{old} is the old name of {new}: give {new} only")
    err.print(f"warning: {old} is now {new}; the old name goes in the next release", highlight=False, markup=False)
    return old_value
