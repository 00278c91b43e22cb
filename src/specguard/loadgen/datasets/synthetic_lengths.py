"""``synthetic:lengths``: prompts of controlled token counts, for comparisons where only one thing varies.

Lengths are counted with the served model's own tokenizer (``tokenizer.json``, through ``tokenizers``), without
special tokens: a server that adds a BOS, or a chat template, reports that many more prompt tokens. Each
item's prompt length is drawn from ``prompt_tokens`` (normal, rounded, clipped to [min, max]) and counts the
shared prefix; the text is random words from a small vocabulary (little for an n-gram proposer to find),
cut at the token boundary where the count is reached. Every item starts with the same ``prefix_tokens``
tokens, the last a newline, so the body cannot merge with the prefix's last token. Output lengths are fixed:
``max_tokens`` is drawn from ``output_tokens`` and sent with ``ignore_eos``. Seeded; the parameters, the
tokenizer's hash, the lengths measured and the items that missed their drawn length are recorded in ``PromptSet.generator``.
"""

from __future__ import annotations

import hashlib
import random
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.loadgen.datasets.options import LengthDistribution, SyntheticLengths
from specguard.loadgen.prompt_items import PromptFileError, PromptItem, PromptSet

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["synthetic_lengths", "draw_length"]

_VOCAB = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
    "upsilon phi chi psi omega red green blue cyan magenta yellow black white river stone cloud paper"
).split()
_ADJUST_STEPS = 8  # a cut at a token boundary re-encodes to the same count at once for BPE and word-level tokenizers


def draw_length(dist: LengthDistribution, rng: random.Random) -> int:
    value = round(rng.gauss(dist.mean, dist.std)) if dist.std > 0 else round(dist.mean)
    value = max(value, dist.low)
    return min(value, dist.max) if dist.max is not None else value


def _count(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


def _text_of(tok: Tokenizer, head: str, target: int, rng: random.Random) -> tuple[str, int]:
    """``head`` followed by random words, cut so that the whole is ``target`` tokens (or as near as it goes)."""
    text = head + " ".join(rng.choice(_VOCAB) for _ in range(max(target, 1)))
    best = (text, _count(tok, text))
    for _ in range(_ADJUST_STEPS):
        enc = tok.encode(text, add_special_tokens=False)
        n = len(enc.ids)
        if abs(n - target) < abs(best[1] - target):
            best = (text, n)
        if n == target:
            return text, n
        if n > target:
            text = text[: max(enc.offsets[target - 1][1], len(head) + 1)]
        else:
            text = f"{text} {rng.choice(_VOCAB)}"
    return best


def synthetic_lengths(params: SyntheticLengths, tokenizer_dir: Path, count: int, seed: int) -> PromptSet:
    """``count`` items with the drawn prompt and output lengths, measured with the tokenizer at ``tokenizer_dir``."""
    from specguard.tokenizer_files import TokenizeError, load_tokenizer, tokenizer_json

    try:
        tok = load_tokenizer(tokenizer_dir)
        tok_sha = hashlib.sha256(tokenizer_json(tokenizer_dir).read_bytes()).hexdigest()
    except (TokenizeError, OSError, ValueError) as exc:  # tokenizers raises a bare Exception subclass of ValueError
        raise PromptFileError(f"synthetic:lengths: tokenizer {tokenizer_dir}: {exc}") from exc
    rng = random.Random(f"lengths:{seed}")
    prefix = ""
    if params.prefix_tokens:
        # P - 1 tokens of words and the newline: a newline is a token of its own in the tokenizers seen here
        prefix = (_text_of(tok, "", params.prefix_tokens - 1, rng)[0] if params.prefix_tokens > 1 else "") + "\n"
    items: list[PromptItem] = []
    measured: list[int] = []
    off_target = 0
    for _ in range(count):
        target = draw_length(params.prompt_tokens, rng)
        text, got = _text_of(tok, prefix, target, rng)
        measured.append(got)
        off_target += got != target
        items.append(
            PromptItem(prompt=text, segment="synthetic", max_tokens=draw_length(params.output_tokens, rng), ignore_eos=True)
        )
    generator: dict[str, str | int] = {
        "set": "lengths",
        "count": count,
        "seed": seed,
        "prompt_tokens": params.prompt_tokens.describe(),
        "prefix_tokens": params.prefix_tokens,
        "output_tokens": params.output_tokens.describe(),
        "measured_prefix_tokens": _count(tok, prefix),
        "tokenizer_sha256": tok_sha,
        "measured_prompt_tokens": f"mean={statistics.fmean(measured):.1f},min={min(measured)},max={max(measured)}",
        "items_off_target": off_target,  # items whose text could not be cut to the drawn count exactly
    }
    return PromptSet(source="synthetic:lengths", items=items, lines=list(range(count)), generator=generator)
