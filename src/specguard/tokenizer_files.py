"""The one loader of Hugging Face tokenizer files (``tokenizer.json`` and its ``tokenizer_config.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specguard.errors import RuntimeFailure

if TYPE_CHECKING:
    from tokenizers import Tokenizer


class TokenizeError(RuntimeFailure):
    """A tokenizer that cannot be loaded or used (no tokenizer.json, no chat template, a template that raised)."""

    code = "tokenize_failed"


def tokenizer_json(path: Path) -> Path:
    """``path`` itself if it is a file, else ``path/tokenizer.json``; TokenizeError if that does not exist."""
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.exists():
        raise TokenizeError(f"{file}: no tokenizer.json (give a Hugging Face tokenizer directory)")
    return file


def load_tokenizer(path: Path) -> Tokenizer:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_json(path)))


def tokenizer_config(path: Path) -> dict[str, Any]:
    """The ``tokenizer_config.json`` beside the tokenizer, or {} when there is none."""
    config = tokenizer_json(path).parent / "tokenizer_config.json"
    return dict(json.loads(config.read_text())) if config.exists() else {}
