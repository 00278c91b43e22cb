"""The one loader of specguard's YAML files (check plans, rollout files): errors name the file, the line and the key."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from specguard.errors import InputFileError
from specguard.validation import describe, read_input_text

M = TypeVar("M", bound=BaseModel)


def yaml_line(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int:
    """The 1-based line of the deepest node of ``loc`` that the YAML has (the key's line for a mapping entry)."""
    if node is None:
        return 1
    line: int = node.start_mark.line + 1  # PyYAML is untyped: its marks' lines are ints
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if str(k.value) == str(part)), None)
            if match is None:
                return line
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def load_yaml_model(path: Path, model: type[M], error: type[InputFileError], what: str) -> M:
    """``model`` validated from the YAML mapping at ``path``; ``error`` with ``path:line: key: expected`` lines if not.

    ``what`` names the file in the message for a missing, empty or unreadable file ("check plan", "rollout file").
    """
    try:
        text = read_input_text(path, what)
    except InputFileError as exc:
        raise error(str(exc)) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        root = yaml.compose(text)
        lines = describe(exc, show_input=False)
        wheres = [f"{path}:{yaml_line(root, err['loc'])}" for err in exc.errors()]
        raise error("\n".join(f"{where}: {line}" for where, line in zip(wheres, lines, strict=True))) from exc
