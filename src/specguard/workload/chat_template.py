"""Chat templates rendered exactly as Hugging Face ``transformers``' ``apply_chat_template`` renders them.

vLLM's OpenAI server renders chat requests through ``apply_chat_template``, so
a local rendering that differs by one character tokenizes differently. What it
does, and this module copies (tests/system/test_chat_templates.py checks
token ids against ``transformers`` in the embedded runtime):

* a sandboxed jinja2 environment with ``trim_blocks`` and ``lstrip_blocks``,
  the ``loopcontrols`` extension and a ``{% generation %}`` block tag (which
  renders its body: the assistant mask it can track is not needed here);
* its own ``tojson`` filter: ``json.dumps`` without ASCII or HTML escaping
  (jinja2's filter escapes ``<``, ``>``, ``&`` and ``'``);
* the globals ``raise_exception`` and ``strftime_now``;
* the render variables ``messages``, ``tools``, ``documents`` (``None`` when
  not given, but defined), ``add_generation_prompt`` and every named special
  token (``bos_token``, ``eos_token``, ... as strings).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specguard.tokenizer_files import TokenizeError

# transformers' SPECIAL_TOKENS_ATTRIBUTES: the named special tokens a template sees as variables.
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class _GenerationBlock(Extension):
    """``{% generation %}...{% endgeneration %}``: transformers marks assistant text with it; it renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        block = nodes.CallBlock(self.call_method("_body"), [], [], body)
        block.set_lineno(lineno)
        return block

    def _body(self, caller: Any) -> str:
        return str(caller())


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return dt.datetime.now().strftime(fmt)


def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise TokenizeError(f"chat template does not compile: {exc}") from exc


def special_tokens(config: dict[str, Any]) -> dict[str, str]:
    """The named special tokens of a ``tokenizer_config.json``, as strings (an AddedToken dict gives its content)."""
    out: dict[str, str] = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None:
            out[name] = str(value)
    return out


def render(
    template: jinja2.Template,
    messages: list[dict[str, Any]],
    specials: dict[str, str],
    *,
    tools: list[dict[str, Any]] | None = None,
    documents: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **kwargs: Any,
) -> str:
    """The prompt text; a template that raises (``raise_exception``, a jinja error, or a Python error inside it,
    such as a str template given list contents) is a TokenizeError: the template is the model's code, not ours."""
    variables = {**specials, **kwargs}  # extra variables override special tokens, as in transformers
    try:
        return template.render(
            messages=messages, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **variables
        )
    except jinja2.TemplateError as exc:
        raise TokenizeError(f"chat template: {exc}") from exc
    except Exception as exc:
        raise TokenizeError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
