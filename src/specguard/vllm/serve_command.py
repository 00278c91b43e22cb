"""``vllm serve`` command lines and the three speculation surfaces: legacy flags, ``--speculative-config`` and
``--spec-*``. Pure.

Reads a ``vllm serve ...`` line (or a systemd ``ExecStart=``), pulls every
speculation setting out of it the way vLLM's FlexibleArgumentParser and argparse
would (underscores in flag names, dotted keys appended as one last JSON object,
``-sc``, unique prefixes, the last of a repeated option, each option's own
``type``: ``json.loads`` for ``--speculative-config``, ``int`` for
``--spec-tokens``) and merges them as ``create_speculative_config`` does.
``spec_forms`` writes a config back in the form a given release accepts.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, cast

from pydantic import BaseModel, Field

from specguard.errors import UsageError
from specguard.vllm import knowledge as K
from specguard.vllm.findings import Finding
from specguard.vllm.spec_forms import NONE_TEXTS, SPEC_CONFIG_FLAG, config_json, legacy_to_config

SERVER_MODULES = ("vllm.entrypoints.openai.api_server",)


class CommandError(UsageError):
    pass


class Speculation(BaseModel):
    """Speculation settings found in a command line, merged as vLLM merges them."""

    config: dict[str, Any] | None = None
    forms: list[str] = Field(default_factory=list, description="legacy_flags, speculative_config, dotted_keys, spec_args")
    findings: list[Finding] = Field(default_factory=list)
    legacy: dict[str, Any] = Field(default_factory=dict, description="legacy flag -> value, as written")


def split_command(text: str) -> list[str]:
    """argv of a shell line or a systemd ExecStart= (with its prefixes and backslash continuations)."""
    lines = [ln.rstrip() for ln in text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines()]
    starts = [ln.strip() for ln in lines if ln.strip().startswith("ExecStart=")]
    line = starts[-1][len("ExecStart=") :] if starts else " ".join(ln for ln in lines if not ln.strip().startswith("#"))
    line = line.lstrip("-@:+!")
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise CommandError(f"cannot split the command line: {exc}") from exc


def server_args(argv: list[str]) -> list[str]:
    """The arguments vLLM's server parser sees: after ``vllm serve`` (model positional kept) or the API module."""
    for i, tok in enumerate(argv):
        if tok == "serve" and i > 0 and argv[i - 1].split("/")[-1] == "vllm":
            return argv[i + 1 :]
        if tok == "-m" and i + 1 < len(argv) and argv[i + 1] in SERVER_MODULES:
            return argv[i + 2 :]
    raise CommandError(
        "no vLLM server invocation found: expected 'vllm serve MODEL ...' or 'python -m vllm.entrypoints.openai.api_server ...'"
    )


def option_value(args: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``args`` (``--flag value`` or ``--flag=value``, underscores allowed)."""
    for i, tok in enumerate(args):
        flag, _, inline = tok.partition("=")
        if flag.replace("_", "-") in names:
            return inline or (args[i + 1] if i + 1 < len(args) else None)
    return None


def model_argument(args: list[str]) -> str | None:
    """``vllm serve MODEL`` puts it first; the API-server module takes ``--model``."""
    return args[0] if args and not args[0].startswith("-") else option_value(args, "--model")


# What argparse takes for an option (Python 3.11 ``_parse_optional``): a leading '-', not a negative number, no space.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# FlexibleArgumentParser: "Everything between the first -- and the first ." is a flag's name.
_FLAG_NAME = re.compile(r"(?<=--)[^.]*")
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
# Options of 0.32's serve parser that start with "--spec" but are no speculation setting (abbreviation ambiguity).
_OTHER_SPEC_PREFIXED = ("--specialize-active-lora",)


def _takes_no_value(tok: str) -> bool:
    """True when argparse would read ``tok`` as an option, so a flag before it has no value ("expected one argument")."""
    return len(tok) > 1 and tok.startswith("-") and not _NEGATIVE_NUMBER.match(tok) and " " not in tok


def _human_readable_int(text: str) -> int:
    """vLLM's ``human_readable_int``: '1k' = 1000, '1K' = 1024, else ``int()``."""
    text = text.strip()
    match = _HUMAN_INT.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in "kmgt":
            return int(float(number) * 10 ** (3 * ("kmgt".index(suffix) + 1)))
        binary: int = 2 ** (10 * ("KMGT".index(suffix) + 1))
        return int(number) * binary  # a decimal with a binary suffix: ValueError
    return int(text)


def _dotted_value(text: str) -> Any:
    """A dotted key's value as FlexibleArgumentParser reads it: JSON, else a human-readable int, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return _human_readable_int(text)
    except ValueError:
        return text


def _merge_nested(original: dict[str, Any], update: dict[str, Any]) -> None:
    """FlexibleArgumentParser's ``recursive_dict_update``: dicts merge, lists extend, anything else is replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _merge_nested(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] += value
        else:
            original[key] = value


def _flexible_args(args: list[str], findings: list[Finding]) -> list[tuple[str, bool]]:
    """``args`` after FlexibleArgumentParser.parse_args rewrites them (0.9.0+), each with 'came from dotted keys'.

    Underscores in a flag's name (up to its first '.') become dashes; every dotted ``--x.key value`` is taken out
    and its keys gathered into one JSON object per flag, appended as ``--x '{...}'`` after all other arguments:
    argparse then lets it replace an earlier ``--x '{...}'``, as it does with any repeated option.
    """
    processed = []
    for arg in args:
        if arg.startswith("--"):
            key, eq, rest = arg.partition("=")
            processed.append(_FLAG_NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + eq + rest)
        else:
            processed.append(arg)
    taken: set[int] = set()
    dicts: dict[str, dict[str, Any]] = {}
    for i, arg in enumerate(processed):
        if i in taken or not arg.startswith("-") or "." not in arg:
            continue
        name, eq, text = arg.partition("=")
        if eq and "." not in name:
            continue  # the '.' was only in the value
        if not eq:
            if i + 1 >= len(processed):
                findings.append(
                    Finding(
                        key=name,
                        message=f"{name} has no value; vLLM fails with an IndexError",
                        rule="a dotted key takes the next argument",
                        fix=f"{name} VALUE",
                    )
                )
                taken.add(i)
                continue
            text = processed[i + 1]
            taken.add(i + 1)
        nested: Any  # a list or a scalar, then the dicts built around it
        if name.endswith("+"):
            name, nested = name[:-1], text.split(",")
        else:
            nested = _dotted_value(text)
        flag, *keys = name.split(".")
        for key in reversed(keys):
            nested = {key: nested}
        _merge_nested(dicts.setdefault(flag, {}), nested)
        taken.add(i)
    out = [(arg, False) for i, arg in enumerate(processed) if i not in taken]
    for flag, gathered in dicts.items():
        out += [(flag, True), (json.dumps(gathered), True)]
    return out


def _spec_flags(version: K.Version) -> list[str]:
    surface = K.surface_for(version)
    flags = [SPEC_CONFIG_FLAG] + (list(K.SPEC_ARG_KEYS) if surface.spec_args else [])
    return flags + [f for f in K.LEGACY_FLAG_KEYS if surface.legacy_flags and f.startswith("--spec")]


def _resolve_flag(name: str, version: K.Version, findings: list[Finding]) -> str | None:
    """The speculation option argparse resolves ``name`` to: exact, ``-sc``, or a unique prefix (allow_abbrev)."""
    if name == "-sc" or name == SPEC_CONFIG_FLAG or name in K.SPEC_ARG_KEYS:
        return name
    if not name.startswith("--spec") or name in K.LEGACY_FLAG_KEYS:
        return None
    ours = [f for f in _spec_flags(version) if f.startswith(name)]
    if not ours:
        return None
    matches = ours + [f for f in _OTHER_SPEC_PREFIXED if f.startswith(name)]
    if len(matches) > 1:
        findings.append(
            Finding(
                key=name,
                message=f"ambiguous option: {name} could match {', '.join(matches)}",
                rule="argparse allow_abbrev",
                fix=f"spell out {ours[0]}",
            )
        )
        return None
    if ours[0] in K.LEGACY_FLAG_KEYS:
        return None
    findings.append(
        Finding(
            key=name,
            severity="warning",
            message=f"'{name}' is an abbreviation argparse resolves to {ours[0]}",
            rule="argparse allow_abbrev",
            fix=f"spell out {ours[0]}",
        )
    )
    return ours[0]


def _parse_config_value(text: str, flag: str, out: list[Finding]) -> tuple[bool, Any]:
    """``--speculative-config`` is ``optional_type(json.loads)``: '' and 'None' are None, anything else JSON only."""
    if text in NONE_TEXTS:
        return True, None
    try:
        return True, json.loads(text)
    except ValueError:
        out.append(
            Finding(
                key=flag,
                message=f"{flag} value is not JSON: {text[:200]} (vLLM: 'Value ... cannot be converted to json.loads')",
                rule="--speculative-config is parsed with json.loads",
                fix="write JSON (double quotes, true/false/null) and quote it for the shell: "
                '--speculative-config \'{"method": "ngram", ...}\'',
            )
        )
        return False, None


def _parse_spec_arg(flag: str, text: str, version: K.Version, out: list[Finding]) -> tuple[bool, Any]:
    """A ``--spec-*`` value with the option's argparse type in 0.32: method and model ``optional_type(str)`` (method
    with the method choices), tokens plain ``int``."""
    if flag == "--spec-tokens":
        try:
            return True, int(text)
        except ValueError:
            out.append(
                Finding(
                    key=flag,
                    message=f"argument {flag}: invalid int value: '{text}'",
                    rule="--spec-tokens is type=int",
                    fix=f"{flag} N, a whole number",
                )
            )
            return False, None
    if text in NONE_TEXTS:
        return True, None
    if flag == "--spec-method" and text not in K.methods_for(version):
        if K.method_unconfirmed(text, version):
            out.append(
                Finding(
                    key=flag,
                    severity="warning",
                    rule="--spec-method choices",
                    message=f"'{text}' may not be among vLLM {K.version_text(version)}'s --spec-method "
                    "choices (specguard has not read this release's literal)",
                )
            )
        else:
            out.append(
                Finding(
                    key=flag,
                    message=f"argument {flag}: invalid choice: '{text}'",
                    rule="--spec-method choices are the accepted methods",
                    fix="one of: " + ", ".join(K.methods_for(version)),
                )
            )
            return False, None
    return True, text


def extract_speculation(args: list[str], version: K.Version) -> Speculation:
    """Every speculation setting in ``args``, parsed as vLLM's parser and ``create_speculative_config`` do.

    argparse keeps the last occurrence of a repeated option, so a later ``--speculative-config`` (or the object
    built from dotted keys, which FlexibleArgumentParser appends last) replaces an earlier one; ``--spec-*``
    values are then put into that object, refused where it already has the key.
    """
    findings: list[Finding] = []
    legacy: dict[str, Any] = {}
    spec_args: dict[str, Any] = {}
    config_given = dotted_given = short_alias = False
    config_value: Any = None
    tokens = _flexible_args(args, findings)
    i = 0
    while i < len(tokens):
        tok, from_dotted = tokens[i]
        name, eq, inline = tok.partition("=") if tok.startswith("-") else (tok, "", "")
        if name in K.LEGACY_FLAG_KEYS:
            takes_value = name not in K.LEGACY_BOOLEAN_FLAGS
            value = inline if eq else (tokens[i + 1][0] if takes_value and i + 1 < len(tokens) else None)
            legacy[name] = True if not takes_value else _scalar(value or "")
            i += 1 if eq or not takes_value else 2
            continue
        flag = _resolve_flag(name, version, findings) if tok.startswith("-") else None
        if flag is None:
            i += 1
            continue
        if eq:
            text = inline
            i += 1
        elif i + 1 < len(tokens) and not _takes_no_value(tokens[i + 1][0]):
            text = tokens[i + 1][0]
            i += 2
        else:
            findings.append(
                Finding(
                    key=name,
                    message=f"argument {name}: expected one argument",
                    rule="argparse: an option's value cannot look like an option",
                    fix=f"write {name}=VALUE",
                )
            )
            i += 1
            continue
        if flag in (SPEC_CONFIG_FLAG, "-sc"):
            short_alias |= flag == "-sc"
            dotted_given |= from_dotted
            config_given |= not from_dotted
            ok, value = _parse_config_value(text, name, findings)
            if ok:
                config_value = value  # argparse: the last occurrence wins
        else:
            ok, value = _parse_spec_arg(flag, text, version, findings)
            if ok:
                spec_args[flag] = value
    forms = [
        f
        for f, present in (
            ("legacy_flags", legacy),
            ("speculative_config", config_given),
            ("dotted_keys", dotted_given),
            ("spec_args", spec_args),
        )
        if present
    ]
    forms += ["short_alias"] if short_alias else []
    findings += _surface_findings(version, legacy, config_given or dotted_given, dotted_given, spec_args, forms)
    config = _merge(legacy, config_value, spec_args, findings)
    return Speculation(config=config, forms=forms, findings=findings, legacy=legacy)


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _surface_findings(
    v: K.Version, legacy: dict[str, Any], json_given: bool, dotted: bool, spec_args: dict[str, Any], forms: list[str]
) -> list[Finding]:
    surface, vt = K.surface_for(v), K.version_text(v)
    out: list[Finding] = []
    if legacy and not surface.legacy_flags:
        fix = f"{SPEC_CONFIG_FLAG} '{config_json(legacy_to_config(legacy)[0])}'"
        for flag in legacy:
            out.append(
                Finding(
                    key=flag,
                    message=f"{flag} was removed in 0.8.3; vLLM {vt} fails with 'unrecognized arguments'",
                    rule="legacy speculation flags exist up to 0.8.2",
                    fix=fix,
                )
            )
    elif legacy and v == (0, 8, 2):
        out.append(
            Finding(
                key=next(iter(legacy)),
                severity="warning",
                rule="deprecated in 0.8.2, removed in 0.8.3",
                message="legacy speculation flags still work in 0.8.2 but are deprecated",
                fix=f"{SPEC_CONFIG_FLAG} '{config_json(legacy_to_config(legacy)[0])}'",
            )
        )
    if json_given and not surface.speculative_config:
        out.append(
            Finding(
                key=SPEC_CONFIG_FLAG,
                message=f"vLLM {vt} has no {SPEC_CONFIG_FLAG} (added in 0.8.2)",
                rule="--speculative-config from 0.8.2",
                fix="use the legacy flags (see translations)",
            )
        )
    if dotted and not surface.dotted_keys:
        out.append(
            Finding(
                key=SPEC_CONFIG_FLAG + ".*",
                message=f"dotted keys need 0.9.0+, this is {vt}",
                rule="FlexibleArgumentParser dotted keys from 0.9.0",
                fix="pass one JSON object",
            )
        )
    if "short_alias" in forms and not surface.short_alias:
        out.append(
            Finding(
                key="-sc",
                message=f"-sc needs 0.19.0+, this is {vt}",
                rule="-sc alias from 0.19.0",
                fix=f"write {SPEC_CONFIG_FLAG}",
            )
        )
    if spec_args and not surface.spec_args:
        for flag in spec_args:
            out.append(
                Finding(
                    key=flag,
                    message=f"{flag} needs 0.22.0+; vLLM {vt} fails with 'unrecognized arguments'",
                    rule="--spec-method/--spec-model/--spec-tokens from 0.22.0",
                    fix=f"put '{K.SPEC_ARG_KEYS[flag]}' inside {SPEC_CONFIG_FLAG}",
                )
            )
    return out


def _merge(
    legacy: dict[str, Any], config_value: Any, spec_args: dict[str, Any], findings: list[Finding]
) -> dict[str, Any] | None:
    """``EngineArgs.create_speculative_config`` (0.22+): ``--spec-*`` values go into the last JSON value (``{}`` when
    there is none); no flag, or null, with no ``--spec-*`` value means speculation off. ``{}`` stays a config."""
    merged = config_value
    for flag, key in K.SPEC_ARG_KEYS.items():  # vLLM's order, not the command line's
        value = spec_args.get(flag)
        if value is None:
            continue
        if merged is None:
            merged = {}
        if not isinstance(merged, dict):
            break
        if key in merged:
            findings.append(
                Finding(
                    key=flag,
                    message=f"`{flag} and {SPEC_CONFIG_FLAG}['{key}'] are mutually exclusive`",
                    rule="--spec-* merge (0.22+)",
                    fix=f"set '{key}' in one place only",
                )
            )
        merged[key] = value
    if merged is not None and not isinstance(merged, dict):
        findings.append(
            Finding(
                key=SPEC_CONFIG_FLAG,
                message=f"{SPEC_CONFIG_FLAG} must be a JSON object, not {type(merged).__name__}",
                rule="JSON object",
            )
        )
        merged = None
    if legacy:
        merged = {**legacy_to_config(legacy)[0], **(merged or {})}
    return cast("dict[str, Any] | None", merged)  # a JSON value; anything but an object was reported and dropped above
