"""A prompt file in any supported format (or ``synthetic:lengths``) into the one ``PromptSet``.

The set's ``sha256`` is the file's bytes followed by the reading options (format, turns, field mapping):
the same file read two ways sends different prompts, and ``compare`` must see that. The options are also
in ``generator`` for a reader, with ``skipped_records`` where a format skips records it cannot use.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from specguard.loadgen.datasets.conversations import question_items, sharegpt_items
from specguard.loadgen.datasets.generic import generic_item
from specguard.loadgen.datasets.options import PromptOptions
from specguard.loadgen.datasets.records import read_records
from specguard.loadgen.prompt_items import PromptFileError, PromptItem, PromptSet

__all__ = ["load_dataset", "source_problem", "SYNTHETIC_LENGTHS"]

SYNTHETIC_LENGTHS = "synthetic:lengths"


def source_problem(source: str, options: PromptOptions) -> str | None:
    """Why ``source`` and ``options`` do not go together, or None: checked before anything is read."""
    if source == SYNTHETIC_LENGTHS:
        if options.synthetic is None:
            return (
                "synthetic:lengths needs its parameters (prompt_tokens, output_tokens; bench: --prompt-tokens, --output-tokens)"
            )
        if options.format != "specguard" or options.fields is not None or options.turns != "first":
            return "synthetic:lengths is generated: format, fields and turns apply to prompt files"
        return None
    if options.synthetic is not None:
        return "synthetic parameters (prompt_tokens, output_tokens, prefix_tokens) apply to synthetic:lengths only"
    if source.startswith("synthetic:") and (
        options.format != "specguard" or options.fields is not None or options.turns != "first"
    ):
        return "format, fields and turns apply to prompt files, not to a synthetic set"
    return None


def load_dataset(path: Path, options: PromptOptions) -> PromptSet:
    """Every record of ``path`` read as ``options.format``; the first bad record stops it, named with its key."""
    records, data = read_records(path)
    items: list[PromptItem] = []
    lines: list[int] = []
    skipped = 0
    for record in records:
        if options.format == "sharegpt":
            got = sharegpt_items(record, options)
        elif options.format in ("spec-bench", "speed-bench"):
            got = question_items(record, options)
        else:
            assert options.fields is not None  # PromptOptions requires it for generic
            got = [generic_item(record, options.fields)]
        skipped += not got
        items += got
        lines += [record.index] * len(got)
    if not items:
        raise PromptFileError(
            f"{path}: no prompts ({len(records)} records, none usable as {options.format} with turns {options.turns})"
        )
    described = options.describe()
    digest = hashlib.sha256(data + b"\0" + json.dumps(described, sort_keys=True).encode()).hexdigest()
    generator: dict[str, str | int] = {**described, "records": len(records), "skipped_records": skipped}
    return PromptSet(source=str(path), items=items, lines=lines, sha256=digest, generator=generator)
