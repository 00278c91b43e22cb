"""The ``--config`` and ``--command`` inputs of preflight and inventory: a speculative config, a ``vllm serve`` line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specguard.errors import UsageError
from specguard.validation import read_input_text
from specguard.vllm.serve_command import CommandError, server_args, split_command

__all__ = ["ServeInputError", "load_command", "load_config"]


class ServeInputError(UsageError):
    """Bad input: the message names the file or option, the position and what was expected."""

    code = "bad_serve_input"


def load_config(text: str) -> dict[str, Any]:
    """``--config``: a JSON object, or a path to a file holding one (a path that does not exist is reported as missing)."""
    source = "--config"
    if not text.lstrip().startswith(("{", "[")):
        source, text = text, read_input_text(Path(text), "speculative config")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServeInputError(
            f"{source}: line {exc.lineno}, column {exc.colno}: not JSON ({exc.msg}); "
            'expected an object such as {"method": "ngram", "num_speculative_tokens": 4}'
        ) from exc
    if not isinstance(value, dict):
        raise ServeInputError(f"{source}: expected a JSON object, got {type(value).__name__}")
    return value


def load_command(text: str) -> list[str]:
    """``--command``: a ``vllm serve`` line or a systemd unit (file path or text) -> the server's arguments.

    One word with no spaces is a file path, and must exist; anything else is the command text itself.
    """
    source = "--command"
    if "\n" not in text and not any(c.isspace() for c in text.strip()):
        source, text = text, read_input_text(Path(text), "command file")
    try:
        return server_args(split_command(text))
    except CommandError as exc:
        raise ServeInputError(f"{source}: {exc}") from exc
