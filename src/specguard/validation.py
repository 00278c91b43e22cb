"""Validation at the edge: option values through the library's own pydantic models, URLs, and input files.

Every command validates all of its options and input files here before it
sends a request or writes a file. Bounds live on the models (``LoadShape``,
``BenchConfig``, ``CheckPlan``, ``PlanRequest``...), so an option and the same
key in a file are held to the same rule; this module only turns a pydantic
error into the one-line message a user can act on, naming the option (or the
file, line and key) and what was expected.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ValidationError

from specguard.errors import InputFileError, OptionError, OutputExistsError

M = TypeVar("M", bound=BaseModel)

_UTF8_BOM = b"\xef\xbb\xbf"


def check_base_url(value: str) -> str:
    """``http(s)://host[:port][/path]``, nothing else: no other scheme, no credentials, no query."""
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected http(s)://host[:port], e.g. http://127.0.0.1:8000")
    if parts.username or parts.password:
        raise ValueError("credentials do not go in a URL; use --api-key-env")
    if parts.query or parts.fragment or any(c.isspace() for c in value):
        raise ValueError("expected http(s)://host[:port][/path] without query, fragment or spaces")
    if port == 0:
        raise ValueError("port 0 is not a server's port")
    return value


HttpUrl = Annotated[str, AfterValidator(check_base_url)]


def api_key_from_env(env_name: str | None, named_by: str = "--api-key-env") -> str | None:
    """The API key held by the environment variable ``env_name``; None when no variable is named.

    Keys are never options or plan keys themselves (they would show in ``ps`` and in stored plans), only the
    name of the variable holding one. ``named_by`` says where that name was given: an option (the error shows
    it with its value, as every option error does) or a check plan's key path.
    """
    if not env_name:
        return None
    value = os.environ.get(env_name)
    if value is None:
        if named_by.startswith("-"):
            raise OptionError(f"{named_by} {env_name}: the variable is not set")
        raise OptionError(f"{named_by}: the environment variable {env_name} is not set")
    return value


# The OpenAI SDK's variables: a base URL and a key given the way every OpenAI client takes them (issue 29).
OPENAI_BASE_URL = "OPENAI_BASE_URL"
OPENAI_API_KEY = "OPENAI_API_KEY"


def server_api_key(env_name: str | None) -> str | None:
    """The key sent to a server: the variable ``--api-key-env`` names, else ``OPENAI_API_KEY`` when it is set."""
    if env_name:
        return api_key_from_env(env_name)
    return os.environ.get(OPENAI_API_KEY) or None


def env_base_url() -> str | None:
    """``OPENAI_BASE_URL`` when it is set, checked as a server URL (an error names the variable)."""
    return url_option(os.environ.get(OPENAI_BASE_URL) or None, OPENAI_BASE_URL)


def server_url(value: str | None, option: str = "--url") -> str | None:
    """A server URL option, else ``OPENAI_BASE_URL`` when it is set; either checked, an error naming where it came from."""
    return url_option(value, option) if value is not None else env_base_url()


def describe(
    exc: ValidationError,
    names: Mapping[str, str] | None = None,
    *,
    show_input: bool = True,
    unknown_key: str = "unknown key",
) -> list[str]:
    """One line per pydantic error, in ``exc.errors()`` order: ``NAME: what was expected (got VALUE)``.

    NAME is an option (from ``names``) or a key path. Files that point at the line already (a prompt file, a
    check plan) leave the value out (``show_input=False``); ``unknown_key`` may list the keys a format has.
    """
    lines = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"])
        name = (names or {}).get(loc, f"key '{loc}'" if loc else "")
        msg = unknown_key if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        # json_invalid's input is the whole document: the message already says where it breaks
        quiet = not show_input or e["type"] in ("extra_forbidden", "missing", "json_invalid") or isinstance(got, dict | list)
        shown = "" if quiet else f" (got {_shorten(repr(got))})"
        lines.append(f"{name}: {msg}{shown}" if name else f"{msg}{shown}")
    return lines


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def options(model: type[M], values: Mapping[str, Any], names: Mapping[str, str]) -> M:
    """``model`` built from command-line values; a bad value is an ``OptionError`` naming its option."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        raise OptionError("; ".join(describe(exc, names))) from exc


def default(model: type[BaseModel], field: str) -> Any:
    """A request model field's default: the command line shows and uses the model's, so there is one source."""
    return model.model_fields[field].default


def given(**values: Any) -> dict[str, Any]:
    """The options that were given: an omitted one (None) takes its request model's default."""
    return {name: value for name, value in values.items() if value is not None}


def finite(value: float | None, option: str, *, positive: bool = False, minimum: float | None = None) -> float | None:
    """A float option that must be a real number (NaN and inf mean nothing here), optionally > 0 or >= minimum."""
    if value is None:
        return None
    if not math.isfinite(value):
        raise OptionError(f"{option}: expected a finite number (got {value})")
    if positive and value <= 0:
        raise OptionError(f"{option}: expected a number > 0 (got {value:g})")
    if minimum is not None and value < minimum:
        raise OptionError(f"{option}: expected a number >= {minimum:g} (got {value:g})")
    return value


def _a_file(what: str) -> str:
    """``a prompt file``, ``an inventory file``: the article, and ``file`` only where ``what`` lacks it."""
    noun = what if what.endswith("file") else f"{what} file"
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def read_input_bytes(path: Path, what: str) -> bytes:
    """A file's bytes, or one line saying exactly why not: missing, a directory, unreadable, or empty."""
    if not path.exists():
        raise InputFileError(f"{path}: {what} not found")
    if path.is_dir():
        raise InputFileError(f"{path}: is a directory; expected {_a_file(what)}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    if not data.strip():
        raise InputFileError(f"{path}: the {what} is empty")
    return data


def read_input_text(path: Path, what: str) -> str:
    """A UTF-8 text file's contents; a BOM, a binary file or another encoding each get their own message."""
    data = read_input_bytes(path, what)
    check_text_head(path, data[:65536], what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: the {what} is not UTF-8 text (byte {exc.start}: {exc.reason})") from exc


def check_text_head(path: Path, head: bytes, what: str) -> None:
    """The first bytes of a text input: a BOM and binary content are refused with their own messages."""
    if head.startswith(_UTF8_BOM):
        raise InputFileError(f"{path}: the {what} starts with a UTF-8 byte-order mark; save it as UTF-8 without BOM")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputFileError(f"{path}: the {what} is UTF-16; save it as UTF-8")
    if b"\x00" in head:
        raise InputFileError(f"{path}: the {what} is a binary file (it holds NUL bytes); expected UTF-8 text")


def text_option(value: str | None, option: str) -> str | None:
    """A text option (JSON, a command line, a path) that was given must say something."""
    if value is not None and not value.strip():
        raise OptionError(f"{option}: expected a value, got an empty string")
    return value


def input_path(path: Path | None, option: str, *, directory: bool = False) -> Path | None:
    """A path option that must exist: a file, or with ``directory`` a directory; one line naming it otherwise."""
    if path is None:
        return None
    if not path.exists():
        raise OptionError(f"{option} {path}: not found")
    if directory and not path.is_dir():
        raise OptionError(f"{option} {path}: not a directory; expected a directory")
    if not directory and path.is_dir():
        raise OptionError(f"{option} {path}: is a directory; expected a file")
    return path


def output_file(path: Path, option: str) -> Path:
    """A file this command will write: not a directory, and in a directory that exists."""
    if path.is_dir():
        raise OptionError(f"{option} {path}: is a directory; expected a file path")
    parent = path.parent
    if not parent.is_dir():
        raise OptionError(f"{option} {path}: the directory {parent} does not exist")
    return path


def url_option(value: str | None, option: str = "--url") -> str | None:
    """A server URL option: http(s)://host[:port][/path], or a usage error naming the option."""
    if value is None:
        return None
    try:
        return check_base_url(value)
    except ValueError as exc:
        raise OptionError(f"{option} {value}: {exc}") from exc


def version_option(value: str | None, option: str = "--vllm-version") -> str | None:
    """A vLLM version option: MAJOR.MINOR[.PATCH] with an optional suffix (0.32.0, 0.11.0rc1, 0.32.0+cpu)."""
    if value is not None and not re.fullmatch(r"v?\d+\.\d+[A-Za-z0-9.+-]*", value.strip()):
        raise OptionError(f"{option} {value!r}: expected a vLLM version MAJOR.MINOR.PATCH, such as 0.32.0")
    return value


def tokenizer_option(path: Path | None, option: str = "--tokenizer", *, load: bool = False) -> Path | None:
    """A local tokenizer: a directory holding tokenizer.json, or that file itself.

    With ``load`` the file is parsed too: a command that hands the path on to a child process (bench's
    recorder) would otherwise fail there, mid-run, with that process's traceback.
    """
    if path is None:
        return None
    if not path.exists():
        raise OptionError(f"{option} {path}: not found")
    if path.is_dir() and not (path / "tokenizer.json").is_file():
        raise OptionError(f"{option} {path}: no tokenizer.json there (give a Hugging Face tokenizer directory)")
    if load:
        from specguard.tokenizer_files import load_tokenizer

        try:
            load_tokenizer(path)
        except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
            raise OptionError(f"{option} {path}: cannot load it as a tokenizer.json ({_shorten(str(exc))})") from exc
    return path


def refuse_existing(paths: list[Path], option: str) -> None:
    """No command overwrites a file it did not create: an existing target needs --force."""
    existing = [str(p) for p in paths if p.exists()]
    if existing:
        raise OutputExistsError(f"{option}: {', '.join(existing)} already exists; pass --force to replace it")
