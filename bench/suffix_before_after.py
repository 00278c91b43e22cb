"""The suffix cache before and after issue 14's rewrite: the same requests through both, in one run.

"Before" is the pure-Python cache of commit ``deede75`` (proposers/ as it was), taken from this checkout's git
history into a temporary package, replayed as assess ran it then (default garbage collection) and with this
tree's ``fewer_gc_collections`` (the share of the gain that is the collector's); "after" is this tree's cache as
assess runs it now. Same requests as bench/acceptance_replay.py (synthetic, and natural text when a document
and tokenizer are given). Prints output tokens replayed per second, best of 3 (2 for the slow old cache).

Not a test: the figures depend on the machine. Usage (in a git checkout):
    PYTHONPATH=src .venv/bin/python bench/suffix_before_after.py [--text DOC --tokenizer DIR] [--requests 300]
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceptance_replay import synthetic_requests, text_requests  # noqa: E402

from specguard.proposers import SuffixCache, SuffixParams, replay_suffix  # noqa: E402
from specguard.proposers.suffix import fewer_gc_collections  # noqa: E402

BEFORE = "deede75"
OLD_FILES = ("__init__", "ngram", "replay", "suffix")


def old_proposers(root: Path, into: Path) -> Any:
    """proposers/ at ``BEFORE`` as the package ``oldproposers`` under ``into``."""
    pkg = into / "oldproposers"
    pkg.mkdir()
    for name in OLD_FILES:
        src = subprocess.run(
            ["git", "-C", str(root), "show", f"{BEFORE}:src/specguard/proposers/{name}.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (pkg / f"{name}.py").write_text(src.replace("specguard.proposers", "oldproposers"))
    sys.path.insert(0, str(into))
    return importlib.import_module("oldproposers")


def best_rate(
    make: Callable[[], Any], replay: Callable[..., Any], reqs: list[tuple[list[int], list[int]]], gc: bool, repeats: int
) -> float:
    out = sum(len(o) for _, o in reqs)
    best = float("inf")
    for _ in range(repeats):
        cache = make()
        t = time.perf_counter()
        if gc:
            with fewer_gc_collections():
                for i, (p, o) in enumerate(reqs):
                    replay(cache, f"r{i}", p, o, 1 << 30)
        else:
            for i, (p, o) in enumerate(reqs):
                replay(cache, f"r{i}", p, o, 1 << 30)
        best = min(best, time.perf_counter() - t)
    return out / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", type=Path)
    ap.add_argument("--tokenizer", type=Path)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--depth", type=int, default=24)
    a = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    workloads = [("synthetic", synthetic_requests(a.requests, 0))]
    if a.text is not None and a.tokenizer is not None:
        workloads.append(("natural text", text_requests(a.text, a.tokenizer, a.requests, 0)))
    with tempfile.TemporaryDirectory() as d:
        old = old_proposers(root, Path(d))
        for name, reqs in workloads:
            rates = {
                "before": best_rate(
                    lambda: old.SuffixCache(old.SuffixParams(max_tree_depth=a.depth)), old.replay_suffix, reqs, False, 2
                ),
                "before, fewer collections": best_rate(
                    lambda: old.SuffixCache(old.SuffixParams(max_tree_depth=a.depth)), old.replay_suffix, reqs, True, 2
                ),
                "after": best_rate(lambda: SuffixCache(SuffixParams(max_tree_depth=a.depth)), replay_suffix, reqs, True, 3),
            }
            shown = ", ".join(f"{k} {v:,.0f}" for k, v in rates.items())
            print(
                f"{name}: output tokens/s {shown}; after / before {rates['after'] / rates['before']:.1f}x, "
                f"after / before with fewer collections {rates['after'] / rates['before, fewer collections']:.1f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
