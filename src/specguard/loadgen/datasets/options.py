"""How a prompt source is read: its format, the field mapping, the turns taken, a synthetic set's lengths.

One pydantic model (``PromptOptions``) holds these for ``bench``'s options and a check plan's ``prompts:``
entry alike, so an option and the same plan key are held to the same rule and give the same message.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specguard.models_base import FiniteModel

__all__ = [
    "PROMPT_FORMATS",
    "PromptFormat",
    "Turns",
    "FieldMap",
    "LengthDistribution",
    "SyntheticLengths",
    "PromptOptions",
    "parse_length_spec",
    "parse_field_map",
]

PromptFormat = Literal["specguard", "sharegpt", "spec-bench", "speed-bench", "generic"]
PROMPT_FORMATS: tuple[str, ...] = ("specguard", "sharegpt", "spec-bench", "speed-bench", "generic")
Turns = Literal["first", "all"]


class FieldMap(FiniteModel):
    """Which record key holds what. ``generic`` needs ``prompt`` or ``messages``; the others may rename ``segment``."""

    prompt: str | None = Field(default=None, description="key of the prompt text (completions)")
    messages: str | None = Field(default=None, description="key of a list of {role, content} (chat)")
    segment: str | None = Field(default=None, description="key of the segment label")
    max_tokens: str | None = Field(default=None, description="key of the output-token limit")

    @model_validator(mode="after")
    def _not_both(self) -> FieldMap:
        if self.prompt is not None and self.messages is not None:
            raise ValueError("give one of 'prompt' or 'messages', not both")
        for name, value in self.model_dump().items():
            if value is not None and not value.strip():
                raise ValueError(f"'{name}' names an empty key")
        return self


class LengthDistribution(FiniteModel):
    """A token count per item: normal(mean, std), rounded, clipped to [min, max]; std 0 fixes it at mean."""

    mean: float = Field(gt=0)
    std: float = Field(default=0.0, ge=0)
    min: int | None = Field(default=None, ge=1)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> LengthDistribution:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self

    @property
    def low(self) -> int:
        return self.min if self.min is not None else 1

    def describe(self) -> str:
        parts = [f"mean={self.mean:g}", f"std={self.std:g}"]
        parts += [f"{k}={v}" for k, v in (("min", self.min), ("max", self.max)) if v is not None]
        return ",".join(parts)


class SyntheticLengths(FiniteModel):
    """``synthetic:lengths``: prompts of controlled token counts, measured with the served tokenizer."""

    prompt_tokens: LengthDistribution = Field(description="whole prompt, shared prefix included")
    prefix_tokens: int = Field(default=0, ge=0, description="a prefix of this many tokens shared by every item")
    output_tokens: LengthDistribution = Field(description="max_tokens per item, sent with ignore_eos")
    tokenizer: str | None = Field(default=None, description="the served model's tokenizer dir (bench: --tokenizer)")

    @model_validator(mode="after")
    def _prefix_fits(self) -> SyntheticLengths:
        if self.prefix_tokens and self.prompt_tokens.low <= self.prefix_tokens:
            raise ValueError(
                f"prompt_tokens.min ({self.prompt_tokens.low}) must exceed prefix_tokens ({self.prefix_tokens}): "
                "every prompt holds the prefix and at least one token of its own"
            )
        return self


class PromptOptions(FiniteModel):
    """How to read a prompt file (or make ``synthetic:lengths``): the keys a plan's ``prompts:`` entry adds."""

    format: PromptFormat = Field(default="specguard", description="the file's format")
    fields: FieldMap | None = Field(default=None, description="record keys, for generic (and segment elsewhere)")
    turns: Turns = Field(default="first", description="first turn only, or one item per assistant turn")
    synthetic: SyntheticLengths | None = Field(default=None, description="parameters of synthetic:lengths")

    @model_validator(mode="after")
    def _consistent(self) -> PromptOptions:
        f = self.fields
        if self.format == "generic" and (f is None or (f.prompt is None and f.messages is None)):
            raise ValueError(
                "format generic needs fields.prompt or fields.messages, the key holding the prompt "
                "(bench: --prompt-field prompt=KEY)"
            )
        if self.format != "generic" and f is not None and (f.prompt or f.messages or f.max_tokens):
            raise ValueError(
                f"format {self.format}: only fields.segment can be mapped (prompt, messages, max_tokens are generic's)"
            )
        if self.format == "specguard" and f is not None:
            raise ValueError("format specguard has fixed keys; fields applies to the other formats")
        if self.turns == "all" and self.format in ("spec-bench", "speed-bench"):
            raise ValueError(
                f"format {self.format}: turns all is not supported: question files hold no answers, so the assistant "
                "turns between user turns are unknown; use turns first"
            )
        if self.turns == "all" and self.format not in ("sharegpt", "spec-bench", "speed-bench"):
            raise ValueError(f"format {self.format}: turns applies to conversations (sharegpt)")
        return self

    def describe(self) -> dict[str, str | int]:
        """The reading options, for ``PromptSet.generator`` and the prompts' identity."""
        out: dict[str, str | int] = {"format": self.format, "turns": self.turns}
        if self.fields is not None:
            out.update({f"field.{k}": v for k, v in self.fields.model_dump().items() if v is not None})
        return out


def parse_length_spec(text: str) -> dict[str, float]:
    """``200`` (fixed) or ``mean=200,std=50,min=50,max=400`` into LengthDistribution's keys; ValueError otherwise."""
    text = text.strip()
    try:
        return {"mean": float(text)}
    except ValueError:
        pass
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ("mean", "std", "min", "max"):
            raise ValueError(f"expected N or mean=N,std=N,min=N,max=N (got {part.strip()!r})")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{key}: expected a number (got {value.strip()!r})") from None
        out[key] = int(number) if key in ("min", "max") and number.is_integer() else number
    return out


def parse_field_map(pairs: list[str]) -> dict[str, str]:
    """``KEY=FIELD`` pairs (``prompt=question``, ``segment=category``) into FieldMap's keys; ValueError otherwise."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, field = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in FieldMap.model_fields:
            raise ValueError(f"expected KEY=FIELD with KEY one of {', '.join(FieldMap.model_fields)} (got {pair!r})")
        out[key] = field.strip()
    return out
