"""Reading a run argument: a specguard run directory or another tool's result file (``FILE#N``: one of several)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specguard.errors import InputFileError
from specguard.results.foreign.run import LoadedRun, RunFormat

__all__ = ["load_any_run", "detect_format", "split_selector"]


def split_selector(arg: str) -> tuple[Path, int | None]:
    """``FILE#N`` picks the N-th (0-based) benchmark of a GuideLLM file that holds several (a sweep)."""
    path, sep, index = arg.rpartition("#")
    if sep and index.isdigit() and path:
        return Path(path), int(index)
    return Path(arg), None


def detect_format(data: object) -> RunFormat | None:
    """Which foreign format a parsed JSON document is, from the keys each tool always writes."""
    if isinstance(data, dict):
        if isinstance(data.get("benchmarks"), list):
            return "guidellm"
        if "ttfts" in data and "itls" in data:
            return "vllm-bench"
    return None


def load_any_run(arg: str) -> LoadedRun:
    """A specguard run directory, a vLLM bench result file or a GuideLLM ``benchmarks.json`` (``#N`` for one of several)."""
    from specguard.results.foreign.guidellm import parse_guidellm
    from specguard.results.foreign.vllm_bench import parse_vllm_bench
    from specguard.results.run_dir import load_run

    path, index = split_selector(arg)
    if path.is_dir() and index is None:
        info, records, _ = load_run(path)
        return LoadedRun(arg, "specguard", info, records)
    if not path.exists():
        raise InputFileError(f"{path}: run directory not found (nor a vllm bench result or GuideLLM benchmarks.json)")
    data = _read_json(path)
    fmt = detect_format(data)
    if fmt == "vllm-bench":
        if index is not None:
            raise InputFileError(f"{arg}: '#{index}' selects a GuideLLM benchmark; {path} is a vllm bench result")
        return parse_vllm_bench(data, arg)
    if fmt == "guidellm":
        return parse_guidellm(data, arg, index)
    raise InputFileError(
        f"{path}: not a directory, nor a vllm bench serve --save-detailed result (keys 'ttfts', 'itls') "
        "or a GuideLLM benchmarks.json (key 'benchmarks')"
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: not a directory, nor a readable result file: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: not a directory, nor a result file (line {exc.lineno}: not JSON: {exc.msg})") from exc
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: not a directory, nor a result file (expected a JSON object at the top)")
    return data
