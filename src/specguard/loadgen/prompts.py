"""Prompt sources: a JSONL prompt file, a dataset in another format, or a built-in synthetic set.

Every line of a prompt file is validated before any traffic is sent; the
first bad line stops the run with file:line and the reason. Other formats
(ShareGPT, Spec-Bench, SPEED-Bench, generic, Parquet) and ``synthetic:lengths``
are read by ``loadgen/datasets/`` into the same ``PromptSet``.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from pydantic import ValidationError

from specguard.errors import InputFileError
from specguard.loadgen.datasets.load import SYNTHETIC_LENGTHS, load_dataset, source_problem
from specguard.loadgen.datasets.options import PromptOptions
from specguard.loadgen.datasets.records import json_lines
from specguard.loadgen.prompt_items import ChatMessage, PromptFileError, PromptItem, PromptSet
from specguard.validation import describe, read_input_text

__all__ = [
    "SYNTHETIC_SETS",
    "ChatMessage",
    "PromptItem",
    "PromptSet",
    "PromptFileError",
    "load_prompt_file",
    "synthetic_prompts",
    "load_prompts",
]

SYNTHETIC_SETS = ("random", "repetitive", "open-ended", "mixed")


def _other_format(text: str) -> str | None:
    """The format a file that is not specguard's prompts.jsonl looks like, from its first record (of a JSON array or
    of JSON lines): ``conversations`` is ShareGPT's, ``turns`` Spec-Bench's (SPEED-Bench's with its ``sub_category`` or
    ``difficulty``); None when it looks like none of them."""
    head = text.lstrip()
    try:
        if head.startswith("["):
            first = json.loads(head)[0] if head else None
        else:
            first = json.loads(next(line for line in head.splitlines() if line.strip()))
    except (ValueError, IndexError, KeyError, TypeError, StopIteration):
        return None
    if isinstance(first, dict) and "conversations" in first:
        return "sharegpt"
    if isinstance(first, dict) and "turns" in first:
        # SPEED-Bench's records are Spec-Bench's with metadata of their own (sub_category, difficulty, source)
        return "speed-bench" if {"sub_category", "difficulty"} & set(first) else "spec-bench"
    return None


def load_prompt_file(path: Path) -> PromptSet:
    try:
        text = read_input_text(path, "prompt file")
    except InputFileError as exc:
        raise PromptFileError(str(exc)) from exc
    try:
        return _specguard_prompts(path, text)
    except PromptFileError as exc:
        other = _other_format(text)
        if other is None:
            raise
        # A ShareGPT file given without its format failed with "expected a JSON object, got list" (issue 29).
        raise PromptFileError(
            f"{path}: this looks like a {other} file, not specguard's prompts.jsonl (one JSON object per line with "
            f"'prompt' or 'messages'); read it with --prompt-format {other} (in a check plan: prompts.format: {other})"
        ) from exc


def _specguard_prompts(path: Path, text: str) -> PromptSet:
    items: list[PromptItem] = []
    lines: list[int] = []
    for record in json_lines(path, text):
        try:
            items.append(PromptItem.model_validate(record.data))
        except ValidationError as exc:
            problems = describe(exc, show_input=False, unknown_key=f"unknown key (expected {', '.join(PromptItem.model_fields)})")
            raise PromptFileError(f"{record.where}: {'; '.join(problems)}") from exc
        lines.append(record.index)
    if not items:
        raise PromptFileError(f"{path}: no prompts (the file is empty)")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return PromptSet(source=str(path), items=items, lines=lines, sha256=digest)


def synthetic_prompts(name: str, count: int = 64, seed: int = 0, max_tokens: int = 64) -> PromptSet:
    """Built-in prompt sets, for starting without data.

    random      words drawn uniformly: little for a proposer to find (poor n-gram candidate)
    repetitive  extraction-like: a record listing whose answer repeats parts of the prompt
    open-ended  short open questions, chat-like, each answer unconstrained
    mixed       repetitive and open-ended items alternating, segments "extraction" and "chat"
    """
    if name not in SYNTHETIC_SETS:
        raise PromptFileError(f"unknown synthetic prompt set '{name}' (expected one of {', '.join(SYNTHETIC_SETS)})")
    generator: dict[str, str | int] = {"set": name, "count": count, "seed": seed, "max_tokens": max_tokens}
    if name == "mixed":
        rep = synthetic_prompts("repetitive", count=(count + 1) // 2, seed=seed, max_tokens=max_tokens).items
        chat = synthetic_prompts("open-ended", count=count // 2, seed=seed, max_tokens=max_tokens).items
        mixed = [item for pair in zip(rep, chat) for item in pair] + rep[len(chat) :]
        return PromptSet(source=f"synthetic:{name}", items=mixed, lines=list(range(len(mixed))), generator=generator)
    rng = random.Random(f"{name}:{seed}")
    vocab = (
        "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
        "sigma tau upsilon phi chi psi omega red green blue cyan magenta yellow black white"
    ).split()
    items: list[PromptItem] = []
    for i in range(count):
        if name == "random":
            text = " ".join(rng.choice(vocab) for _ in range(48))
            seg = "random"
        elif name == "repetitive":
            rows = [f"id={rng.randint(100, 999)} name={rng.choice(vocab)} status=ok total={rng.randint(1, 99)}" for _ in range(6)]
            block = "\n".join(rows)
            text = f"Records:\n{block}\n{block}\nRepeat the records exactly:\n{rows[0]}\n"
            seg = "extraction"
        else:
            text = f"Question {i}: tell me something about {rng.choice(vocab)} and {rng.choice(vocab)}."
            seg = "chat"
        items.append(PromptItem(prompt=text, segment=seg, max_tokens=max_tokens))
    return PromptSet(source=f"synthetic:{name}", items=items, lines=list(range(count)), generator=generator)


def load_prompts(
    spec: str,
    seed: int = 0,
    max_tokens: int = 64,
    count: int = 64,
    options: PromptOptions | None = None,
    tokenizer: Path | None = None,
) -> PromptSet:
    """``spec`` is a file path read as ``options.format``, or ``synthetic:NAME`` for a set of ``count`` items.

    ``synthetic:lengths`` measures its lengths with ``options.synthetic.tokenizer``, else ``tokenizer``.
    """
    options = options or PromptOptions()
    problem = source_problem(spec, options)
    if problem:
        raise PromptFileError(f"{spec}: {problem}")
    if spec == SYNTHETIC_LENGTHS:
        from specguard.loadgen.datasets.synthetic_lengths import synthetic_lengths

        assert options.synthetic is not None
        tok = Path(options.synthetic.tokenizer) if options.synthetic.tokenizer else tokenizer
        if tok is None:
            raise PromptFileError("synthetic:lengths: lengths are measured with the served tokenizer; give one (--tokenizer DIR)")
        return synthetic_lengths(options.synthetic, tok, count=count, seed=seed)
    if spec.startswith("synthetic:"):
        return synthetic_prompts(spec.split(":", 1)[1], count=count, seed=seed, max_tokens=max_tokens)
    if options.format == "specguard":
        if Path(spec).suffix.lower() in (".csv", ".parquet"):
            raise PromptFileError(
                f"{spec}: a {Path(spec).suffix} file is not a specguard JSONL prompt file; name its format and fields"
            )
        return load_prompt_file(Path(spec))
    return load_dataset(Path(spec), options)
