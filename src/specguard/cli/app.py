"""The ``specguard`` command line. It parses and delegates; the work lives in the subpackages.

Every command ends through ``cli.exit`` (one exit-code table, one error line,
no traceback without ``--debug``); every option is validated by the model the
library uses, before any request is sent or any file is written.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specguard import __version__
from specguard.cli.canary import register as register_canary_commands
from specguard.cli.check import register as register_check_commands
from specguard.cli.embedded import register as register_embedded_commands
from specguard.cli.exit import EXIT_CODES_EPILOG, SpecguardGroup
from specguard.cli.gates import register as register_gate_commands
from specguard.cli.measure import register as register_measure_commands
from specguard.cli.sim import register as register_sim_commands

app = typer.Typer(
    cls=SpecguardGroup,
    help="Production-readiness gates for speculative decoding on vLLM.",
    epilog=EXIT_CODES_EPILOG,
    no_args_is_help=True,
    add_completion=True,  # --install-completion and --show-completion: shells complete commands and options
    pretty_exceptions_enable=False,
)
# The order of --help: each group registers its commands in the order they were written in one file.
register_embedded_commands(app)
register_gate_commands(app)
register_canary_commands(app)
register_sim_commands(app)
register_measure_commands(app)
register_check_commands(app)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", metavar="", help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", metavar="", help="Show tracebacks (also SPECGUARD_DEBUG=1).")] = False,
) -> None:
    if version:
        print(__version__)
        raise typer.Exit(0)


def main() -> None:
    """The console script: every outcome is mapped to an exit code in ``cli.exit.run_group``."""
    typer.main.get_command(app).main(prog_name="specguard")
