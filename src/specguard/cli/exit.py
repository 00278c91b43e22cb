"""How every command ends: its outcome or its exception becomes one exit code and one line, here and only here.

``SpecguardGroup.main`` is what both the ``specguard`` console script and
in-process tests (typer's ``CliRunner``) call, so the mapping they see is the
same. Errors of the ``specguard.errors`` hierarchy carry their exit code; click's
usage errors are 2; an interrupt (SIGINT, or SIGTERM/SIGHUP, which are made to
behave like it) is 130; an ``OSError`` that escaped is a failure to read or
write (4), reported as one line; anything else is an internal error (4), one
line naming it and the file holding its traceback, the traceback itself shown
only with ``--debug`` or ``SPECGUARD_DEBUG=1``. A command given ``--json``
prints ``{"error": {...}}`` on stdout when it fails, so a script never parses
an empty stdout.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

from typer._click.core import Command, Context
from typer._click.exceptions import ClickException, NoArgsIsHelpError  # typer 0.29 vendors click here
from typer.core import TyperGroup, TyperOption
from typer.exceptions import Abort, Exit

from specguard.cli.output import err
from specguard.embedded.runtime import specguard_home
from specguard.errors import EXIT_CODE_TABLE, ExitCode, SpecguardError
from specguard.lifetime import terminations_interrupt

DEBUG_ENV = "SPECGUARD_DEBUG"

# Typer joins an epilog's lines and keeps its paragraphs: one paragraph per code.
EXIT_CODES_EPILOG = "Exit codes:\n\n" + "\n\n".join(f"{int(code):>3}  {text}" for code, text in EXIT_CODE_TABLE)


def _wants_json(argv: Sequence[str]) -> bool:
    args = list(argv[: list(argv).index("--")] if "--" in argv else argv)
    return "--json" in args


def _wants_debug(argv: Sequence[str]) -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0") or "--debug" in argv


class _Outcome:
    def __init__(self, as_json: bool, debug: bool) -> None:
        self.as_json = as_json
        self.debug = debug

    def traceback(self, exc: BaseException) -> bool:
        """With --debug, the traceback on stderr; says whether it was shown."""
        if self.debug:
            traceback.print_exception(exc, file=sys.stderr)
        return self.debug

    def fail(self, exit_code: int, code: str, message: str, details: dict[str, object] | None = None) -> int:
        err.print("[red]error:[/red] ", end="", highlight=False)
        err.print(message, highlight=False, markup=False, emoji=False)
        if self.as_json:
            error: dict[str, object] = {"code": code, "message": message, "exit_code": int(exit_code)}
            if details:
                error["details"] = details
            print(json.dumps({"error": error}))
        return int(exit_code)


def _save_traceback(exc: BaseException) -> str:
    try:
        d = specguard_home() / "logs"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        path.write_text(f"$ specguard {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(exc)))
        return f"traceback in {path}"
    except OSError as log_exc:
        return f"traceback not saved: {log_exc.strerror or log_exc}"


def run_group(group: TyperGroup, argv: Sequence[str], prog_name: str) -> int:
    """Parse ``argv``, run the command, and return its exit code; the only place outcomes become codes."""
    outcome = _Outcome(_wants_json(argv), _wants_debug(argv))
    with terminations_interrupt():
        try:
            with group.make_context(prog_name, list(argv)) as ctx:
                group.invoke(ctx)
            return ExitCode.OK
        except Exit as exc:
            return int(exc.exit_code)
        except NoArgsIsHelpError as exc:
            exc.show()
            return ExitCode.USAGE
        except ClickException as exc:
            failed_ctx = getattr(exc, "ctx", None)
            hint = f" (see '{failed_ctx.command_path} --help')" if failed_ctx is not None else ""
            return outcome.fail(ExitCode.USAGE, "usage_error", exc.format_message() + hint)
        except (KeyboardInterrupt, Abort):
            return outcome.fail(ExitCode.INTERRUPTED, "interrupted", "interrupted")
        except SpecguardError as exc:
            outcome.traceback(exc)
            return outcome.fail(exc.exit_code, exc.code, exc.message, exc.details)
        except OSError as exc:
            outcome.traceback(exc)
            if exc.errno == errno.EPIPE:
                return ExitCode.RUNTIME_FAILURE  # the reader of stdout went away: nothing more to say to it
            where = f"{exc.filename}: " if exc.filename else ""
            return outcome.fail(ExitCode.RUNTIME_FAILURE, "os_error", f"{where}{exc.strerror or exc}")
        except Exception as exc:  # the one place an unexpected error is turned into a line, not a traceback
            where = "traceback above" if outcome.traceback(exc) else _save_traceback(exc) + "; --debug shows it"
            return outcome.fail(
                ExitCode.RUNTIME_FAILURE, "internal_error", f"internal error: {type(exc).__name__}: {exc} ({where})"
            )


def flags_without_type(command: Command) -> None:
    """Every flag of ``command`` and its subcommands, --help and the completion flags included, shown without a type.

    typer 0.29 prints a flag's type (``--help <bool>``) unless its metavar is set; a flag takes no value, so there
    is none to show. Set once, on the built tree, so that no flag can be left out (issue 29).
    """
    help_option = command.get_help_option(Context(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            flags_without_type(sub)


class SpecguardGroup(TyperGroup):
    """The root command group; its ``main`` maps every outcome through ``run_group``."""

    # Why the ignore below: click's main also takes windows_expand_args, which this CLI (Linux only) never passes
    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        prog_name = prog_name or "specguard"
        flags_without_type(self)
        # A shell asking for completions (_SPECGUARD_COMPLETE set by the script --show-completion prints): answered
        # and exited here, as click's own main does first, before any argument is parsed as a command.
        self._main_shell_completion(extra, prog_name, complete_var)
        code = run_group(self, list(sys.argv[1:] if args is None else args), prog_name)
        if standalone_mode:
            sys.exit(code)
        return code
