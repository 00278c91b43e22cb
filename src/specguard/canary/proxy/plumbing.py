"""The proxy's HTTP plumbing, pure: which headers cross, the error bodies it writes itself, and what a response measured.

Headers cross in both directions as sent, minus the hop-by-hop ones (RFC 9110 section 7.6.1, and any named
in ``Connection``), ``Host`` (the upstream's own), and ``Content-Length``/``Transfer-Encoding``, which
aiohttp recomputes for the body it actually sends (the proxy may have added ``stream_options``). The
client's ``Authorization`` header crosses, and goes nowhere else.

A streamed response is measured exactly as bench measures one (``loadgen.recorder.measure_stream``); a
response that was not streamed has no chunks, so no TTFT: its E2E is the arrival of its last byte and its
tokens are the server's usage.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson
from multidict import CIMultiDict

from specguard.canary.proxy.routing import Api
from specguard.loadgen.client import StreamResult
from specguard.loadgen.recorder import StreamMeasures, measure_stream
from specguard.loadgen.sse import SSEParser

__all__ = ["HOP_BY_HOP", "error_body", "forward_headers", "measure_response"]

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"}
)
_RECOMPUTED = frozenset({"content-length", "host"})


def forward_headers(headers: Iterable[tuple[str, str]], connection: str | None) -> CIMultiDict[str]:
    """``headers`` without hop-by-hop ones (and those ``Connection`` names), ``Host`` and ``Content-Length``."""
    named = {t.strip().lower() for t in (connection or "").split(",") if t.strip()}
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers:
        low = name.lower()
        if low in HOP_BY_HOP or low in _RECOMPUTED or low in named:
            continue
        out.add(name, value)
    return out


def error_body(message: str, kind: str, code: int) -> bytes:
    """An error the proxy answers itself, in vLLM's (OpenAI's) shape, so clients parse it as they parse vLLM's."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


def _http_error(res: StreamResult) -> str:
    text = b"".join(d for _, d in res.pieces)[:500].decode("utf-8", errors="replace")
    return f"HTTP {res.http_status}: {text}"


def _whole(res: StreamResult, api: Api) -> StreamMeasures:
    error = res.error
    obj: Any = None
    if error is None:
        try:
            obj = orjson.loads(b"".join(d for _, d in res.pieces))
        except orjson.JSONDecodeError:
            error = "response body is not JSON"
    usage = obj.get("usage") if isinstance(obj, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    choices = obj.get("choices") if isinstance(obj, dict) else None
    finish = choices[0].get("finish_reason") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    if error is None and isinstance(obj, dict) and "error" in obj and not choices:
        error = f"server error: {obj['error']}"
    output = usage.get("completion_tokens")
    end = res.pieces[-1][0] if res.pieces else res.stream_end
    return StreamMeasures(
        ok=error is None,
        error=error,
        ttft_s=None,
        e2e_s=end if error is None else None,
        stream_end_s=res.stream_end,
        chunk_times_s=[],
        chunk_tokens=[],
        token_source="server_usage" if isinstance(output, int) else None,
        prompt_tokens=usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None,
        output_tokens=output if isinstance(output, int) else None,
        finish_reason=finish if isinstance(finish, str) else None,
    )


def measure_response(res: StreamResult, api: Api, stream: bool) -> StreamMeasures:
    """The measures of one upstream attempt from what arrived (``res.pieces`` are the upstream's reads, usage included)."""
    if res.http_status is None or res.http_status >= 300:
        error = res.error or (_http_error(res) if res.http_status is not None else "no response")
        return StreamMeasures(False, error, None, None, res.stream_end, [], [], None, None, None, None)
    if not stream:
        return _whole(res, api)
    parser = SSEParser(api)
    parser.feed(res.pieces)
    return measure_stream(res, parser.result(), None)
