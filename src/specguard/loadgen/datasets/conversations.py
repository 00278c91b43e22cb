"""ShareGPT conversations and Spec-Bench / SPEED-Bench question files, as prompt items.

These are other tools' formats: their records carry metadata specguard does not use (ShareGPT's ``model``,
SPEED-Bench's ``source``, ``difficulty``...), so only the keys read here are validated and the rest ignored.

ShareGPT: ``{"id": ..., "conversations": [{"from": "human"|"gpt"|"system", "value": ...}]}``, roles mapped to
user / assistant / system. ``turns: first`` gives one item per conversation (any system turns and the first
human turn); ``turns: all`` gives one item per assistant turn: the whole conversation before it, so a
server sees what a chat client would send at that point. A conversation with no human turn gives nothing
(public ShareGPT dumps hold empty ones) and is counted in the set's ``skipped_records``.

Spec-Bench ``question.jsonl`` and SPEED-Bench: ``{"question_id": ..., "category": ..., "turns": [str, ...]}``;
``category`` becomes the segment (``fields.segment`` may name another key, e.g. SPEED-Bench's
``sub_category``). Only the first turn is taken: the files hold no answers, so what the assistant said
between two user turns is unknown, and inventing it would change what the later turns measure.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specguard.loadgen.datasets.options import PromptOptions
from specguard.loadgen.datasets.records import Record
from specguard.loadgen.prompt_items import ChatMessage, PromptFileError, PromptItem
from specguard.validation import describe

__all__ = ["sharegpt_items", "question_items", "record_segment"]

_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Turn(_Lenient):
    from_: Literal["human", "user", "gpt", "chatgpt", "assistant", "system"] = Field(alias="from")
    value: str


class _Conversation(_Lenient):
    conversations: list[_Turn]


class _Question(_Lenient):
    question_id: int | str
    category: str = Field(min_length=1)
    turns: list[str] = Field(min_length=1)


def _validate(model: type[_Lenient], record: Record) -> _Lenient:
    try:
        return model.model_validate(record.data)
    except ValidationError as exc:
        raise PromptFileError(f"{record.where}: {'; '.join(describe(exc, show_input=False))}") from exc


def record_segment(record: Record, key: str | None, default: str) -> str:
    """The segment a record's ``key`` names (a non-empty string or a number), or ``default`` without a key."""
    if key is None:
        return default
    if key not in record.data:
        raise PromptFileError(f"{record.where}: key '{key}': missing (fields.segment names it)")
    value = record.data[key]
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise PromptFileError(f"{record.where}: key '{key}': expected a non-empty segment label (got {value!r})")
    return str(value)


def sharegpt_items(record: Record, options: PromptOptions) -> list[PromptItem]:
    conv = _validate(_Conversation, record)
    assert isinstance(conv, _Conversation)
    segment = record_segment(record, options.fields.segment if options.fields else None, "default")
    messages = [ChatMessage(role=_ROLES[t.from_], content=t.value) for t in conv.conversations]  # type: ignore[arg-type]
    if options.turns == "first":
        first = next((i for i, m in enumerate(messages) if m.role == "user"), None)
        if first is None:
            return []
        head = [m for m in messages[:first] if m.role == "system"] + [messages[first]]
        return [PromptItem(messages=head, segment=segment)]
    # One item per assistant turn that answers a user turn: everything before it.
    return [
        PromptItem(messages=messages[:i], segment=segment)
        for i, m in enumerate(messages)
        if m.role == "assistant" and i > 0 and messages[i - 1].role == "user"
    ]


def question_items(record: Record, options: PromptOptions) -> list[PromptItem]:
    q = _validate(_Question, record)
    assert isinstance(q, _Question)
    segment = record_segment(record, options.fields.segment, q.category) if options.fields else q.category
    return [PromptItem(messages=[ChatMessage(role="user", content=q.turns[0])], segment=segment)]
