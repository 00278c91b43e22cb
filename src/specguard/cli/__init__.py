"""The command line: ``app`` (the Typer app and the measurement commands), one module per command group
(``gates``: Gates 0-3, ``canary``: Gate 5, ``sim``: the simulator), ``exit`` (the one mapping of outcomes to exit
codes) and ``output`` (the consoles). Each parses options into a request model, calls the library, renders.
"""

from __future__ import annotations


def main() -> None:
    """The console script ``specguard`` (``specguard.cli:main``); the app is imported only when it runs."""
    from specguard.cli.app import main as run

    run()
