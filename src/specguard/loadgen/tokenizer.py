"""Local token counting, the fallback when a server reports no usage."""

from __future__ import annotations

from pathlib import Path

from specguard.loadgen.sse import TokenCounter


def local_token_counter(tokenizer_dir: Path) -> TokenCounter:
    from tokenizers import Tokenizer

    path = tokenizer_dir / "tokenizer.json" if tokenizer_dir.is_dir() else tokenizer_dir
    tok = Tokenizer.from_file(str(path))

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count
