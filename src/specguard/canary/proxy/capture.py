"""Optional capture of the canary's client requests as a request log that ``specguard assess`` reads.

Each client request (completions or chat; not its retry) becomes one ``workload.logformat.RequestLogEntry``
line, written through that model so the format cannot drift from what assess validates. Headers are never
captured (the ``Authorization`` header is the client's secret). With ``redact_prompts`` every prompt text
(a completion's prompt, each message's content) becomes ``REDACTED_PROMPT``: assess still accepts the line
(a non-empty string) and keeps its segment, sampling, timing and arrival time, but the prompt's length and
n-gram replay then describe the marker, not the traffic.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specguard.canary.proxy.routing import Api
from specguard.canary.state.records import ProxiedRequest
from specguard.errors import OutputWriteError
from specguard.results.store import JsonlAppender
from specguard.workload.logformat import LogTimings, RequestLogEntry

__all__ = ["REDACTED_PROMPT", "CaptureSettings", "CaptureWriter", "capture_entry"]

REDACTED_PROMPT = "<redacted>"
_SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "seed", "stop", "ignore_eos", "n")


@dataclass(frozen=True)
class CaptureSettings:
    path: Path
    redact_prompts: bool


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(parts)
    return None if content is not None else ""


def capture_entry(api: Api, body: Any, record: ProxiedRequest, redact: bool) -> RequestLogEntry | None:
    """The request-log line of one client request (its final attempt's record), or None if it has no usable prompt."""
    if not isinstance(body, dict):
        return None
    entry: dict[str, Any] = {"endpoint": api, "segment": record.segment, "id": record.request_id}
    entry["timestamp"] = dt.datetime.fromtimestamp(record.received_unix, tz=dt.UTC)
    if isinstance(body.get("model"), str):
        entry["model"] = body["model"]
    sampling = {k: body[k] for k in _SAMPLING_KEYS if body.get(k) is not None}
    if "max_tokens" not in sampling and body.get("max_completion_tokens") is not None:
        sampling["max_tokens"] = body["max_completion_tokens"]
    entry["sampling"] = sampling
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        logged = []
        for m in messages:
            text = _text(m.get("content")) if isinstance(m, dict) else None
            if text is None or not isinstance(m.get("role"), str):
                return None
            logged.append({"role": m["role"], "content": REDACTED_PROMPT if redact else text})
        entry["messages"] = logged
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            if redact:
                entry["prompt"] = REDACTED_PROMPT  # token ids are the prompt as well
            else:
                entry["prompt_token_ids"] = prompt
        elif isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(p, str) for p in prompt)):
            entry["prompt"] = REDACTED_PROMPT if redact else (prompt if isinstance(prompt, str) else "\n".join(prompt))
        else:
            return None
    if record.ok:
        entry["timings"] = LogTimings(ttft_s=record.ttft_s, e2e_s=record.e2e_s)
    try:
        return RequestLogEntry.model_validate(entry)
    except ValidationError:
        return None  # sampling values the log format refuses (a negative temperature): the server refused them too


class CaptureWriter:
    """Appends entries, flushed line by line (not fsynced: the event loop must not wait on the disk)."""

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        try:
            self._out = JsonlAppender(settings.path)
        except OSError as exc:
            raise OutputWriteError(f"{settings.path}: cannot open the capture file: {exc.strerror or exc}") from exc

    def write(self, api: Api, body: Any, record: ProxiedRequest) -> None:
        entry = capture_entry(api, body, record, self.settings.redact_prompts)
        if entry is not None:
            self._out.append(entry, sync=False)

    def close(self) -> None:
        self._out.sync()
        self._out.close()
