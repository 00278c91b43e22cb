"""Helpers shared by tests."""

import signal


def sigint_default() -> None:
    """preexec_fn for children that a test interrupts with SIGINT.

    A CI runner started in the background ignores SIGINT and its children
    inherit that; restored to the default before exec, Python installs its
    own handler and Ctrl-C behaves as it does in a terminal.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
