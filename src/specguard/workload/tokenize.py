"""Token ids for logged requests, as the server saw them: a local tokenizer directory or a server's /tokenize.

Chat messages go through the model's chat template first, rendered exactly
as Hugging Face's ``apply_chat_template`` renders it (``chat_template.py``),
which is what vLLM's OpenAI server does. Logged token ids win over text: re-tokenizing a
response can differ from the ids the model produced.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from specguard.server_metrics.server_facts import auth_headers
from specguard.tokenizer_files import TokenizeError, load_tokenizer, tokenizer_config, tokenizer_json
from specguard.vllm.urls import server_root
from specguard.workload import chat_template
from specguard.workload.logformat import RequestLogEntry

__all__ = ["LocalTokenizer", "ServerTokenizer", "Tokenize", "TokenizeError"]


class Tokenize(Protocol):
    def prompt_ids(self, entry: RequestLogEntry) -> list[int]: ...

    def output_ids(self, entry: RequestLogEntry) -> list[int] | None: ...


class LocalTokenizer:
    def __init__(self, directory: Path):
        self._tok = load_tokenizer(directory)
        base = tokenizer_json(directory).parent
        config = tokenizer_config(directory)
        template = config.get("chat_template")
        if (base / "chat_template.jinja").exists():
            template = (base / "chat_template.jinja").read_text()
        if isinstance(template, list):  # named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        self._template: str | None = template
        self._specials = chat_template.special_tokens(config)
        self._compiled: Any = None

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """The prompt text vLLM's server makes of a chat request (messages, tools, extra template kwargs)."""
        if self._template is None:
            raise TokenizeError("the tokenizer has no chat template, so chat requests cannot be tokenized as served")
        if self._compiled is None:
            self._compiled = chat_template.compile_template(self._template)
        return chat_template.render(
            self._compiled, messages, self._specials, tools=tools, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def encode_chat(self, messages: list[dict[str, Any]], **render_kwargs: Any) -> list[int]:
        """Token ids of the rendered chat: the template writes the special tokens, none are added."""
        return list(self._tok.encode(self.render_chat(messages, **render_kwargs), add_special_tokens=False).ids)

    def prompt_ids(self, entry: RequestLogEntry) -> list[int]:
        if entry.prompt_token_ids is not None:
            return list(entry.prompt_token_ids)
        if entry.messages is not None:
            return self.encode_chat([m.model_dump() for m in entry.messages])
        return list(self._tok.encode(entry.prompt or "", add_special_tokens=True).ids)

    def output_ids(self, entry: RequestLogEntry) -> list[int] | None:
        if entry.response is None:
            return None
        if entry.response.token_ids is not None:
            return list(entry.response.token_ids)
        return list(self._tok.encode(entry.response.text or "", add_special_tokens=False).ids)


class ServerTokenizer:
    """vLLM's ``/tokenize``: the server's own tokenizer and chat template."""

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None):
        self.root = server_root(url)
        self.model = model
        self._headers = {"Content-Type": "application/json", **auth_headers(api_key)}

    def _post(self, body: dict[str, Any]) -> list[int]:
        if self.model:
            body["model"] = self.model
        req = urllib.request.Request(f"{self.root}/tokenize", data=json.dumps(body).encode(), headers=self._headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return list(json.loads(resp.read())["tokens"])
        except (OSError, ValueError, KeyError) as exc:
            raise TokenizeError(f"{self.root}/tokenize: {exc}") from exc

    def prompt_ids(self, entry: RequestLogEntry) -> list[int]:
        if entry.prompt_token_ids is not None:
            return list(entry.prompt_token_ids)
        if entry.messages is not None:
            return self._post({"messages": [m.model_dump() for m in entry.messages], "add_generation_prompt": True})
        return self._post({"prompt": entry.prompt or "", "add_special_tokens": True})

    def output_ids(self, entry: RequestLogEntry) -> list[int] | None:
        if entry.response is None:
            return None
        if entry.response.token_ids is not None:
            return list(entry.response.token_ids)
        return self._post({"prompt": entry.response.text or "", "add_special_tokens": False})
