"""Reading and writing the files of a run directory (``run_dir.RunDir`` names them) and of a command's ``--out``.

Records are appended and flushed (and fsynced) one by one as requests finish,
so an interrupted run or a crash keeps every completed request on disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from specguard.errors import InputFileError, OutputExistsError, OutputWriteError
from specguard.validation import describe, read_input_text

M = TypeVar("M", bound=BaseModel)


class RunDirError(InputFileError):
    """A run directory that cannot be read; the message names the file, line and reason."""


class JsonlAppender:
    """Append-only JSONL file, one flushed line per record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] = path.open("a", encoding="utf-8")

    def append(self, record: BaseModel, sync: bool = True) -> None:
        """Write and flush one line: it survives the process. ``sync`` also makes it survive the machine."""
        self.append_many([record], sync)

    def append_many(self, records: Sequence[BaseModel], sync: bool = True) -> None:
        """Write lines and flush once: one write call for the lot."""
        self._fh.write("".join(r.model_dump_json() + "\n" for r in records))
        self._fh.flush()
        if sync:
            self.sync()

    def sync(self) -> None:
        try:
            os.fsync(self._fh.fileno())
        except (ValueError, OSError):
            pass  # closed already, or a file system without fsync

    def close(self) -> None:
        if not self._fh.closed:
            try:
                self._fh.close()
            except OSError:
                pass  # a flush that failed (disk full) already raised where the line was written


def write_json_atomic(path: Path, model: BaseModel) -> None:
    """Write through a temporary file and rename: a reader (or a resumed check) never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(model.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_yaml_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """``data`` as a YAML document, written as ``write_json_atomic`` writes: a reader never sees half a file.

    For files that other tools read (a Kubernetes manifest for ``kubectl`` or a GitOps pipeline); keys keep
    their order, which is the order those tools' documentation shows.
    """
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False), encoding="utf-8")
    os.replace(tmp, path)


def refuse_overwrite(out_dir: Path, names: Sequence[str], force: bool) -> None:
    """Before writing ``names`` into ``out_dir`` (the ``--out`` of a command): none may exist unless ``force``."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputExistsError(f"--out {out_dir}: exists and is not a directory")
    existing = [name for name in names if (out_dir / name).exists()]
    if existing and not force:
        raise OutputExistsError(f"--out {out_dir}: {', '.join(existing)} already exist; pass --force to replace them")


def write_text_files(out_dir: Path, files: Mapping[str, str], mode: int | None = None) -> list[Path]:
    """Each file through a temporary one and a rename, in order (``mode``: its permission bits); the paths."""
    written: list[Path] = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = out_dir / name
            tmp = path.with_name(f".{name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            if mode is not None:
                tmp.chmod(mode)
            os.replace(tmp, path)
            written.append(path)
    except OSError as exc:
        raise OutputWriteError(f"--out {out_dir}: {exc}") from exc
    return written


def read_json(path: Path, model: type[M]) -> M:
    if not path.exists():
        raise RunDirError(f"{path}: missing")
    try:
        text = read_input_text(path, path.name)
    except InputFileError as exc:
        raise RunDirError(str(exc)) from exc
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        raise RunDirError(f"{path}: {'; '.join(describe(exc))}") from exc


def read_jsonl(path: Path, model: type[M]) -> list[M]:
    """All records of a JSONL file. A torn last line (a crash mid-write) is ignored; any other bad line is an error."""
    out: list[M] = []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError as exc:
        raise RunDirError(f"{path}: missing") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise RunDirError(f"{path}: cannot read: {exc}") from exc
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(model.model_validate_json(line))
        except ValidationError as exc:
            if i == len(lines) - 1:
                break
            err = exc.errors()[0]
            raise RunDirError(f"{path}:{i + 1}: key '{'.'.join(map(str, err['loc']))}': {err['msg']}") from exc
    return out


def dumps(model: BaseModel) -> str:
    return json.dumps(model.model_dump(mode="json"), indent=2)
