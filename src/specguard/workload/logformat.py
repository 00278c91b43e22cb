"""specguard's request-log format: one JSON object per line, one served request each.

Written by operators' exporters and by the canary proxy; read by ``specguard
assess``. A line carries the request as sent (a completion prompt, chat
messages, or prompt token ids), its sampling parameters, an optional segment
label, the response (text and/or token ids) and optional timings.

    {"schema_version": "specguard.request_log/1", "timestamp": "2026-11-29T10:00:00Z",
     "endpoint": "chat", "messages": [{"role": "user", "content": "Summarise: ..."}],
     "sampling": {"temperature": 0, "max_tokens": 256}, "segment": "summarise",
     "response": {"text": "...", "finish_reason": "stop"}, "timings": {"e2e_s": 2.1}}
"""

from __future__ import annotations

import datetime as dt
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specguard.models_base import StrictModel

REQUEST_LOG_SCHEMA: Final = "specguard.request_log/1"  # Final: its type is the literal, as the field wants


class LogMessage(BaseModel):
    role: str
    content: str


class LogSampling(BaseModel):
    model_config = ConfigDict(extra="allow")  # other OpenAI parameters are kept, not checked

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, gt=0)


class LogResponse(BaseModel):
    text: str | None = None
    token_ids: list[int] | None = None
    finish_reason: str | None = None

    @model_validator(mode="after")
    def _something(self) -> LogResponse:
        if self.text is None and self.token_ids is None:
            raise ValueError("a response needs 'text' or 'token_ids'")
        return self


class LogTimings(BaseModel):
    ttft_s: float | None = Field(default=None, ge=0)
    e2e_s: float | None = Field(default=None, ge=0)


class RequestLogEntry(StrictModel):
    schema_version: Literal["specguard.request_log/1"] = REQUEST_LOG_SCHEMA
    timestamp: dt.datetime | None = Field(default=None, description="when the request arrived (ISO 8601 or epoch s)")
    endpoint: Literal["completions", "chat"]
    model: str | None = None
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    messages: list[LogMessage] | None = None
    sampling: LogSampling = Field(default_factory=LogSampling)
    segment: str | None = None
    response: LogResponse | None = None
    timings: LogTimings | None = None
    id: str | None = None

    @model_validator(mode="after")
    def _one_prompt(self) -> RequestLogEntry:
        given = [x is not None for x in (self.prompt, self.prompt_token_ids, self.messages)]
        if sum(given) != 1:
            raise ValueError("exactly one of 'prompt', 'prompt_token_ids' or 'messages' is required")
        if self.messages is not None and self.endpoint != "chat":
            raise ValueError("'messages' needs endpoint 'chat'")
        return self

    def prompt_text(self) -> str:
        """Plain text for segment rules: the prompt, or the last user message."""
        if self.prompt is not None:
            return self.prompt
        if self.messages:
            users = [m.content for m in self.messages if m.role == "user"]
            return users[-1] if users else self.messages[-1].content
        return ""

    def as_bench_item(self, output_len: int | None, segment: str) -> dict[str, object]:
        """This request as a line of a ``specguard bench`` prompt file (its logged output length as max_tokens)."""
        item: dict[str, object] = {"segment": segment}
        if self.messages is not None:
            item["messages"] = [m.model_dump() for m in self.messages]
        else:
            item["prompt"] = self.prompt if self.prompt is not None else ""
        max_tokens = output_len or self.sampling.max_tokens
        if max_tokens:
            item["max_tokens"] = max_tokens
        return item
