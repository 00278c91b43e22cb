"""The consoles the command line writes to, and its one way to fail."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

err = Console(stderr=True, soft_wrap=True)  # error lines stay whole: paths and keys are greppable
out = Console(soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)
