"""A vLLM server's URLs: its root and its OpenAI endpoints, from whichever of them a user gives."""

from __future__ import annotations


def server_root(url: str) -> str:
    """A server's root from its root or its OpenAI /v1 URL."""
    return url.rstrip("/").removesuffix("/v1")


def endpoint_url(base_url: str, api: str) -> str:
    """The completions (``api="completions"``) or chat completions (``"chat"``) URL under a root or /v1 URL."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return f"{base}/{'chat/completions' if api == 'chat' else 'completions'}"
