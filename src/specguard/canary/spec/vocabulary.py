"""The canary's core vocabulary: the names every plane uses for the pools."""

from __future__ import annotations

from typing import Literal

__all__ = ["PoolName"]

PoolName = Literal["baseline", "candidate", "control"]
