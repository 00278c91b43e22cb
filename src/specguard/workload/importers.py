"""Read request logs line by line, whatever shape operators already have, as ``RequestLogEntry``.

Formats: ``specguard`` (the native one), ``openai`` (request/response pairs:
``{"request": {...}, "response": {...}}``, the response bare or under
``body`` as in the Batch API), ``sharegpt`` (``{"conversations": [{"from":
"human", "value": ...}, {"from": "gpt", ...}]}``: one request per assistant
turn), and ``bench`` (``specguard bench`` prompt files: no responses, so they
profile the traffic but cannot be replayed). ``auto`` picks by the first line.
Lines stream; a bad line raises ``LogLineError`` with file, line and reason,
or is counted and skipped with ``skip_bad``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import ValidationError

from specguard.errors import InputFileError
from specguard.validation import check_text_head
from specguard.workload.logformat import RequestLogEntry

LogFormat = Literal["auto", "specguard", "openai", "sharegpt", "bench"]
FORMATS = ("specguard", "openai", "sharegpt", "bench")


class LogLineError(InputFileError):
    def __init__(self, path: Path, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


class SkipCounter:
    """What ``skip_bad`` left out, by reason, with the first few line numbers."""

    def __init__(self) -> None:
        self.count = 0
        self.by_reason: dict[str, int] = {}
        self.examples: list[str] = []

    def add(self, err: LogLineError) -> None:
        self.count += 1
        key = err.reason.split(":")[0][:80]
        self.by_reason[key] = self.by_reason.get(key, 0) + 1
        if len(self.examples) < 10:
            self.examples.append(str(err))


def _reason(exc: ValidationError) -> str:
    e = exc.errors()[0]
    where = ".".join(str(p) for p in e["loc"]) or "line"
    return f"{where}: {e['msg']}"


def detect_format(first: dict[str, Any]) -> str:
    if first.get("schema_version", "").startswith("specguard.request_log"):
        return "specguard"
    if "request" in first and "response" in first:
        return "openai"
    if "conversations" in first:
        return "sharegpt"
    if "prompt" in first or "messages" in first:
        return "bench"
    raise ValueError(
        "cannot tell the log format from the first line: expected specguard's request log, "
        "OpenAI request/response pairs, ShareGPT conversations or a bench prompt file (use --format)"
    )


def _timestamp(value: Any) -> dt.datetime | None:
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, dt.UTC)
    return value if value is None else dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _from_openai(obj: dict[str, Any]) -> list[dict[str, Any]]:
    req = obj["request"]
    resp = obj["response"]
    resp = resp.get("body", resp) if isinstance(resp, dict) else resp
    if not isinstance(req, dict) or not isinstance(resp, dict):
        raise ValueError("'request' and 'response' must be objects")
    req = req.get("body", req)
    choice = (resp.get("choices") or [{}])[0]
    chat = "messages" in req
    text = choice.get("message", {}).get("content") if chat else choice.get("text")
    token_ids = choice.get("token_ids")
    sampling = {
        k: req[k]
        for k in (
            "temperature",
            "top_p",
            "max_tokens",
            "seed",
            "n",
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
            "min_p",
        )
        if k in req
    }
    if "max_completion_tokens" in req and "max_tokens" not in sampling:
        sampling["max_tokens"] = req["max_completion_tokens"]
    entry: dict[str, Any] = {
        "endpoint": "chat" if chat else "completions",
        "model": req.get("model"),
        "sampling": sampling,
        "timestamp": _timestamp(obj.get("timestamp", resp.get("created"))),
        "id": resp.get("id"),
        "segment": obj.get("segment") or (req.get("metadata") or {}).get("segment"),
        "response": {"text": text, "token_ids": token_ids, "finish_reason": choice.get("finish_reason")}
        if (text is not None or token_ids is not None)
        else None,
        "timings": obj.get("timings"),
    }
    if chat:
        entry["messages"] = [{"role": m["role"], "content": _content(m.get("content"))} for m in req["messages"]]
    elif isinstance(req.get("prompt"), list) and all(isinstance(t, int) for t in req["prompt"]):
        entry["prompt_token_ids"] = req["prompt"]
    else:
        entry["prompt"] = req.get("prompt")
    served_prompt = choice.get("prompt_token_ids") or resp.get("prompt_token_ids")  # vLLM's return_token_ids
    if served_prompt and "prompt_token_ids" not in entry and not chat:
        entry.pop("prompt", None)
        entry["prompt_token_ids"] = served_prompt
    return [entry]


def _content(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
}


def _from_sharegpt(obj: dict[str, Any]) -> list[dict[str, Any]]:
    turns = obj["conversations"]
    if not isinstance(turns, list):
        raise ValueError("'conversations' must be a list")
    out: list[dict[str, Any]] = []
    history: list[dict[str, str]] = []
    for i, turn in enumerate(turns):
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise ValueError(f"conversations[{i}].from: unknown speaker {turn.get('from')!r}")
        if role == "assistant" and history:
            out.append(
                {
                    "endpoint": "chat",
                    "messages": list(history),
                    "segment": obj.get("segment"),
                    "response": {"text": turn.get("value", "")},
                    "id": f"{obj.get('id', '')}#{i}",
                }
            )
        history.append({"role": role, "content": str(turn.get("value", ""))})
    return out


def _from_bench(obj: dict[str, Any]) -> list[dict[str, Any]]:
    from specguard.loadgen.prompts import PromptItem

    item = PromptItem.model_validate(obj)
    sampling = {
        k: v
        for k, v in (("temperature", item.temperature), ("top_p", item.top_p), ("max_tokens", item.max_tokens))
        if v is not None
    }
    if item.messages is not None:
        return [
            {
                "endpoint": "chat",
                "messages": [m.model_dump() for m in item.messages],
                "sampling": sampling,
                "segment": item.segment,
            }
        ]
    return [{"endpoint": "completions", "prompt": item.prompt, "sampling": sampling, "segment": item.segment}]


_CONVERTERS = {"openai": _from_openai, "sharegpt": _from_sharegpt, "bench": _from_bench}


def read_log(path: Path, fmt: LogFormat = "auto", skipped: SkipCounter | None = None) -> Iterator[RequestLogEntry]:
    """Entries of a JSONL log, streamed. Raises LogLineError on the first bad line unless ``skipped`` counts them."""
    chosen: str | None = None if fmt == "auto" else fmt
    with open_input_log(path) as fh:
        any_line = False
        for lineno, raw in _lines(path, fh):
            if not raw.strip():
                continue
            any_line = True
            try:
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise LogLineError(path, lineno, f"not JSON: {exc.msg} at column {exc.colno}") from None
                if not isinstance(obj, dict):
                    raise LogLineError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
                if chosen is None:
                    try:
                        chosen = detect_format(obj)
                    except ValueError as exc:
                        raise LogLineError(path, lineno, str(exc)) from None
                try:
                    entries = [obj] if chosen == "specguard" else _CONVERTERS[chosen](obj)
                    parsed = [RequestLogEntry.model_validate(e) for e in entries]
                except ValidationError as exc:
                    raise LogLineError(path, lineno, _reason(exc)) from None
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    raise LogLineError(path, lineno, f"{chosen} format: {type(exc).__name__}: {exc}") from None
            except LogLineError as err:
                if skipped is None:
                    raise
                skipped.add(err)
                continue
            yield from parsed
        if not any_line:
            raise InputFileError(f"{path}: the request log is empty (no request in it)")


def open_input_log(path: Path) -> TextIO:
    """The log opened for streaming, after the checks a whole-file read would make (missing, directory, BOM, binary)."""
    if not path.exists():
        raise InputFileError(f"{path}: request log not found")
    if path.is_dir():
        raise InputFileError(f"{path}: is a directory; expected a request log file")
    try:
        with path.open("rb") as raw:
            check_text_head(path, raw.read(65536), "request log")
        return path.open(encoding="utf-8")
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the request log: {exc.strerror or exc}") from exc


def _lines(path: Path, fh: TextIO) -> Iterator[tuple[int, str]]:
    lineno = 0
    try:
        for lineno, raw in enumerate(fh, start=1):  # noqa: B007 - lineno is read after a decode error
            yield lineno, raw
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}:{lineno + 1}: not UTF-8 text ({exc.reason})") from exc
