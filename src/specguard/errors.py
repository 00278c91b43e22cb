"""specguard's exceptions: one hierarchy, each class carrying the exit code that ``main()`` turns it into.

    SpecguardError                 4  the base; never raised itself
    ├── UsageError                 2  bad input: nothing was sent to a server and no file was written
    │   ├── OptionError            2  an option's value or a combination of options (names the option)
    │   ├── InputFileError         2  a file that is missing, unreadable or malformed (names file, line, key)
    │   └── OutputExistsError      2  a target that already exists and would be overwritten (--force, --resume)
    ├── RuntimeFailure             4  the work could not be carried out
    │   ├── ServerError            4  a server that would not start, is unreachable, or vanished
    │   ├── RequestsFailedError    4  every request of a run failed (the message counts the distinct errors)
    │   ├── OutputWriteError       4  disk full, a read-only or vanished output directory
    │   └── HelperProcessError     4  one of specguard's own helper processes (record writer, scraper) failed
    └── Interrupted              130  SIGINT or SIGTERM; everything completed is on disk

A verdict is not an error: NO-GO (1) and INCONCLUSIVE (3) are outcomes, returned by
the commands as exit codes; so are "rejected" (preflight) and "differs" (inventory diff).
Every class keeps ``ValueError`` or ``RuntimeError`` as a second base so that library
code written against those still catches them.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "ExitCode",
    "SpecguardError",
    "UsageError",
    "OptionError",
    "InputFileError",
    "OutputExistsError",
    "RuntimeFailure",
    "ServerError",
    "RequestsFailedError",
    "OutputWriteError",
    "HelperProcessError",
    "Interrupted",
    "EXIT_CODE_TABLE",
]


class ExitCode(IntEnum):
    """The one exit-code table of every command."""

    OK = 0  # success, GO, accepted, identical
    NO_GO = 1  # NO-GO, a rejected config, a diff that changes more than one variable
    USAGE = 2  # usage error or bad input
    INCONCLUSIVE = 3  # the evidence cannot support a verdict
    RUNTIME_FAILURE = 4  # server down, would not start, every request failed, disk full, internal error
    INTERRUPTED = 130  # SIGINT or SIGTERM


EXIT_CODE_TABLE: tuple[tuple[ExitCode, str], ...] = (
    (ExitCode.OK, "success, GO, accepted"),
    (ExitCode.NO_GO, "NO-GO, rejected, a diff of more than one variable"),
    (ExitCode.USAGE, "usage error or bad input (nothing was sent or written)"),
    (ExitCode.INCONCLUSIVE, "INCONCLUSIVE: too little evidence for a verdict"),
    (ExitCode.RUNTIME_FAILURE, "runtime failure: server down or would not start, every request failed, disk full"),
    (ExitCode.INTERRUPTED, "interrupted (SIGINT/SIGTERM); completed requests are kept"),
)


class SpecguardError(Exception):
    """The base of every error specguard raises on purpose."""

    exit_code: ExitCode = ExitCode.RUNTIME_FAILURE
    code: str = "error"

    def __init__(self, message: str, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def __str__(self) -> str:
        return self.message


class UsageError(SpecguardError, ValueError):
    """Bad input; raised before any traffic is sent or any file is written."""

    exit_code = ExitCode.USAGE
    code = "usage_error"


class OptionError(UsageError):
    """An option's value, or a combination of options, that cannot be used."""

    code = "bad_option"


class InputFileError(UsageError):
    """A file that is missing, unreadable, or not what was expected; the message names file, line and key."""

    code = "bad_input_file"


class OutputExistsError(UsageError):
    """A file or directory that exists and that this command did not create: it is never overwritten silently."""

    code = "output_exists"


class RuntimeFailure(SpecguardError, RuntimeError):
    """The work could not be carried out."""

    exit_code = ExitCode.RUNTIME_FAILURE
    code = "runtime_failure"


class ServerError(RuntimeFailure):
    """A server that would not start, could not be reached, or went away."""

    code = "server_error"


class RequestsFailedError(RuntimeFailure):
    """Every request of a run failed; the message lists the distinct errors with counts."""

    code = "all_requests_failed"


class OutputWriteError(RuntimeFailure):
    """An output could not be written: disk full, read-only or vanished directory. What was written is kept."""

    code = "output_write_failed"


class HelperProcessError(RuntimeFailure):
    """One of specguard's own helper processes (record writer, scraper) failed."""

    code = "child_process_failed"


class Interrupted(SpecguardError):
    """SIGINT or SIGTERM ended the command; everything completed was kept."""

    exit_code = ExitCode.INTERRUPTED
    code = "interrupted"
