"""Any JSON / JSON Lines / CSV / Parquet file, read through a field mapping.

``fields.prompt`` (text, for completions) or ``fields.messages`` (a list of ``{role, content}``, or in a CSV
cell the JSON text of one) names the prompt; ``fields.segment`` and ``fields.max_tokens`` are optional. Other
keys of a record are ignored: a generic file is someone else's, its other columns are theirs. A CSV cell is
text, so ``max_tokens`` may be given as digits there.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError

from specguard.loadgen.datasets.conversations import record_segment
from specguard.loadgen.datasets.options import FieldMap
from specguard.loadgen.datasets.records import Record
from specguard.loadgen.prompt_items import ChatMessage, PromptFileError, PromptItem
from specguard.validation import describe

__all__ = ["generic_item"]

_MESSAGES = TypeAdapter(list[ChatMessage])


def _field(record: Record, key: str) -> Any:
    if key not in record.data:
        raise PromptFileError(f"{record.where}: key '{key}': missing (the field mapping names it)")
    return record.data[key]


def _messages(record: Record, key: str) -> list[ChatMessage]:
    value = _field(record, key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{record.where}: key '{key}': not a JSON list of messages ({exc.msg})") from exc
    try:
        messages = _MESSAGES.validate_python(value)
    except ValidationError as exc:
        problems = [p.replace("key '", f"key '{key}.", 1) for p in describe(exc, show_input=False)]
        raise PromptFileError(f"{record.where}: {'; '.join(problems)}") from exc
    if not messages:
        raise PromptFileError(f"{record.where}: key '{key}': no messages")
    return messages


def _max_tokens(record: Record, key: str) -> int | None:
    value = _field(record, key)
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PromptFileError(f"{record.where}: key '{key}': expected a whole number >= 1 (got {value!r})")
    return value


def generic_item(record: Record, fields: FieldMap) -> PromptItem:
    segment = record_segment(record, fields.segment, "default")
    max_tokens = _max_tokens(record, fields.max_tokens) if fields.max_tokens else None
    if fields.messages is not None:
        return PromptItem(messages=_messages(record, fields.messages), segment=segment, max_tokens=max_tokens)
    assert fields.prompt is not None
    text = _field(record, fields.prompt)
    if not isinstance(text, str) or not text.strip():
        raise PromptFileError(f"{record.where}: key '{fields.prompt}': expected non-empty prompt text (got {text!r})")
    return PromptItem(prompt=text, segment=segment, max_tokens=max_tokens)
