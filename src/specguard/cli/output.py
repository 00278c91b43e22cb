"""The consoles the command line writes to: results on stdout, progress and error lines on stderr."""

from __future__ import annotations

from rich.console import Console

err = Console(stderr=True, soft_wrap=True)  # error lines stay whole: paths and keys are greppable
out = Console(soft_wrap=True)
