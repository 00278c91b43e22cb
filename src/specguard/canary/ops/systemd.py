"""Writing argument lists and environment into systemd unit files, so that systemd reads back exactly what was meant.

A unit file is not a shell, but it has its own rules (systemd.service(5) "Command lines", systemd.unit(5)
"Specifiers"): words split on whitespace unless in quotes; C escapes (``\\"``, ``\\\\``, ``\\n``, ``\\xNN``)
inside and outside quotes; ``%`` starts a specifier everywhere (``%%`` is a percent sign); in ``ExecStart=``
``$NAME`` and ``${NAME}`` expand environment variables (``$$`` is a dollar sign), while in ``Environment=``
``$`` means nothing; a lone ``;`` separates commands. The speculative config JSON (``{"method":"ngram",...}``)
hits three of these, which is why every word goes through ``quote_word`` and nothing is written by hand.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from specguard.canary.spec.validators import ENV_NAME

__all__ = ["environment_lines", "exec_line", "quote_word"]

# Words made only of these need no quotes; `%` and `$` are doubled whether quoted or not.
_BARE = re.compile(r"^[A-Za-z0-9_@+=:,./%$-]+$")
_NAMED_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote_word(word: str, *, expands_dollar: bool) -> str:
    """``word`` as one word of a unit file setting; ``expands_dollar`` for ``Exec*=`` lines, where ``$`` expands."""
    if "\0" in word:
        raise ValueError(f"a NUL character cannot be passed through a unit file (in {word!r})")
    text = word.replace("%", "%%")
    if expands_dollar:
        text = text.replace("$", "$$")
    if word and _BARE.match(word):
        return text
    out: list[str] = []
    for ch in text:
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def exec_line(key: str, argv: Sequence[str], *, break_before_options: bool = True) -> str:
    """``KEY=argv...`` for ``ExecStart=`` and friends; the program must be an absolute path (systemd needs one).

    With ``break_before_options`` each ``--option`` starts a continuation line (a trailing backslash joins
    lines; systemd reads the joined line), so that an operator can read the command.
    """
    if not argv or not argv[0].startswith("/"):
        raise ValueError(f"{key}= needs an absolute program path (got {list(argv)[:1]})")
    lines: list[list[str]] = [[quote_word(argv[0], expands_dollar=True)]]
    for word in argv[1:]:
        if break_before_options and word.startswith("--"):
            lines.append([])
        lines[-1].append(quote_word(word, expands_dollar=True))
    return f"{key}=" + " \\\n    ".join(" ".join(words) for words in lines)


def environment_lines(env: Mapping[str, str]) -> list[str]:
    """One ``Environment="NAME=value"`` line per variable, sorted by name."""
    lines = []
    for name in sorted(env):
        if not ENV_NAME.match(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        lines.append("Environment=" + quote_word(f"{name}={env[name]}", expands_dollar=False))
    return lines
