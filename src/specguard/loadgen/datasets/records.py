"""The records of a dataset file, each with where it came from, whatever the container.

JSON arrays (a file whose first character is ``[``), JSON Lines, CSV (``.csv``: a header row, then one record
per row) and Parquet (``.parquet``, through the optional ``pyarrow``). Every record is an object; a bad one
stops the read with the file and its place: ``FILE:LINE`` for JSON Lines, ``FILE: record N`` for a JSON array
or a Parquet file, ``FILE: row N`` for CSV (N counts from 1; the CSV header is row 0).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard.errors import InputFileError
from specguard.loadgen.prompt_items import PromptFileError
from specguard.validation import read_input_bytes, read_input_text

__all__ = ["Record", "json_lines", "read_records", "PARQUET_EXTRA_HINT"]

PARQUET_EXTRA_HINT = "reading Parquet needs pyarrow: pip install 'specguard[parquet]'"


@dataclass(frozen=True)
class Record:
    where: str  # "FILE:LINE", "FILE: record N" or "FILE: row N", for messages
    index: int  # 0-based line (JSON Lines) or record/row number: PromptSet.lines
    data: dict[str, Any]


def read_records(path: Path) -> tuple[list[Record], bytes]:
    """Every record of ``path`` and the file's bytes (for its hash); PromptFileError naming the bad place."""
    try:
        return _read(path)
    except PromptFileError:
        raise
    except InputFileError as exc:  # missing, a directory, empty, not UTF-8: already names the file
        raise PromptFileError(str(exc)) from exc


def _read(path: Path) -> tuple[list[Record], bytes]:
    if path.suffix.lower() == ".parquet":
        data = read_input_bytes(path, "prompt file")
        return _parquet(path), data
    text = read_input_text(path, "prompt file")
    if path.suffix.lower() == ".csv":
        return _csv(path, text), text.encode("utf-8")
    if text.lstrip().startswith("["):
        return _json_array(path, text), text.encode("utf-8")
    return json_lines(path, text), text.encode("utf-8")


def _object(where: str, obj: object) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise PromptFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def json_lines(path: Path, text: str) -> list[Record]:
    """Each non-blank line of ``text`` as a JSON object, with its ``FILE:LINE`` for messages."""
    out = []
    for lineno, raw in enumerate(text.splitlines()):
        if not raw.strip():
            continue
        where = f"{path}:{lineno + 1}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        out.append(Record(where, lineno, _object(where, obj)))
    return out


def _json_array(path: Path, text: str) -> list[Record]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
    if not isinstance(doc, list):
        raise PromptFileError(f"{path}: expected a JSON array of objects, got {type(doc).__name__}")
    return [Record(f"{path}: record {i + 1}", i, _object(f"{path}: record {i + 1}", obj)) for i, obj in enumerate(doc)]


def _csv(path: Path, text: str) -> list[Record]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames:
        raise PromptFileError(f"{path}: a CSV file needs a header row naming its columns")
    out = []
    try:
        for i, row in enumerate(reader):
            where = f"{path}: row {i + 1}"
            if None in row:
                raise PromptFileError(f"{where}: more values than the header has columns")
            if any(v is None for v in row.values()):
                raise PromptFileError(f"{where}: fewer values than the header has columns")
            out.append(Record(where, i, dict(row)))
    except csv.Error as exc:
        raise PromptFileError(f"{path}: row {reader.line_num}: not valid CSV ({exc})") from exc
    return out


def _parquet(path: Path) -> list[Record]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise PromptFileError(f"{path}: {PARQUET_EXTRA_HINT}") from exc
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises its own ArrowInvalid/OSError family for a file it cannot read
        raise PromptFileError(f"{path}: not a readable Parquet file ({exc})") from exc
    return [Record(f"{path}: record {i + 1}", i, dict(row)) for i, row in enumerate(rows)]
