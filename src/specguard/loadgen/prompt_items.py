"""The prompt items every source produces, and the one set type (``PromptSet``) the run loop takes.

Apart from the loaders (``prompts.py``, ``datasets/``) so that each of them can build items without
importing the others.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from specguard.errors import InputFileError
from specguard.models_base import StrictModel

__all__ = ["ChatMessage", "PromptItem", "PromptSet", "PromptFileError"]


class ChatMessage(StrictModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class PromptItem(StrictModel):
    """One line of a prompt file."""

    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    segment: str = "default"
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    ignore_eos: bool | None = None
    stop: list[str] | str | None = None

    @model_validator(mode="after")
    def _one_of_prompt_or_messages(self) -> PromptItem:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("exactly one of 'prompt' or 'messages' is required")
        if self.messages is not None and not self.messages:
            raise ValueError("'messages' is empty")
        return self

    def as_text(self) -> str:
        """Plain text of the prompt, for a completions endpoint given chat messages."""
        if self.prompt is not None:
            return self.prompt
        assert self.messages is not None
        return "\n".join(m.content for m in self.messages)


class PromptSet(BaseModel):
    source: str
    items: list[PromptItem]
    lines: list[int] = Field(description="0-based file line (or synthetic item number) of each item")
    sha256: str | None = Field(
        default=None,
        description="SHA-256 of the prompt file's bytes (for a format other than specguard's, followed by its reading options)",
    )
    generator: dict[str, str | int] | None = Field(
        default=None, description="a synthetic set's generator parameters, or a dataset's reading options"
    )


class PromptFileError(InputFileError):
    """A prompt file that cannot be used; the message names file, line and reason."""
