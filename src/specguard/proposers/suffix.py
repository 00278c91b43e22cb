"""Suffix decoding (Arctic Inference, vLLM ``method="suffix"`` from 0.12), re-implemented for replay. Pure.

Follows vllm-facts.md section 5.2: a per-request tree over the prompt and the
request's own output, a global tree over earlier responses with FIFO
eviction past ``max_cached_requests``, suffixes indexed up to
``max_tree_depth`` tokens. For every match length shorter than the pattern,
the longest path of most frequent children is drafted while the running
probability stays at or above ``min_token_prob``, at most
``floor(match_len * max_spec_factor)`` tokens; the highest score (sum of the
running probabilities) wins, ties to the longer match, and the local tree wins
ties against the global one.

Not verified against Arctic Inference here (it is not installed with the
embedded vLLM): ties between children of equal count go to the first one
seen, which the C++ tree may order differently.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel


class SuffixParams(BaseModel):
    max_tree_depth: int = 24
    max_cached_requests: int = 10_000
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1
    num_speculative_tokens: int | None = None  # None: the tree depth, as vLLM defaults it


# A node is a two-item list [count, children]: children is None until the node gets one. Trees over real
# traffic hold tens of millions of nodes, and a list is far cheaper to create than an object with a dict.
_COUNT, _KIDS = 0, 1


# A node is [count, children or None]; children map a token to its node.
Node = list[Any]


def _new() -> Node:
    return [0, None]


class SuffixTree:
    """Counts of every substring (up to ``max_depth`` tokens) of the sequences appended to it."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root = _new()
        self._seqs: dict[str, list[int]] = {}
        self._active: dict[str, list[Node]] = {}

    def child(self, node: Node, tok: int) -> Node | None:
        kids = node[_KIDS]
        return kids.get(tok) if kids else None

    def append(self, seq_id: str, tokens: Sequence[int]) -> None:
        seq = self._seqs.setdefault(seq_id, [])
        active = self._active.setdefault(seq_id, [])
        root, depth = self.root, self.max_depth
        for tok in tokens:
            seq.append(tok)
            active.append(root)
            root[_COUNT] += 1
            grown = []
            length = len(active)  # the oldest suffix becomes this long
            for node in active:
                kids = node[_KIDS]
                if kids is None:
                    kids = node[_KIDS] = {}
                child = kids.get(tok)
                if child is None:
                    child = kids[tok] = [0, None]
                child[_COUNT] += 1
                if length < depth:
                    grown.append(child)
                length -= 1
            active[:] = grown

    def remove(self, seq_id: str) -> None:
        seq = self._seqs.pop(seq_id, [])
        self._active.pop(seq_id, None)
        for start in range(len(seq)):
            self.root[_COUNT] -= 1
            node = self.root
            for tok in seq[start : start + self.max_depth]:
                child = node[_KIDS][tok]
                child[_COUNT] -= 1
                if child[_COUNT] == 0:
                    del node[_KIDS][tok]
                    break
                node = child

    def speculate(
        self, pattern: Sequence[int], max_spec_tokens: int, max_spec_factor: float, min_token_prob: float
    ) -> tuple[list[int], float]:
        best: list[int] = []
        best_score = 0.0
        for match_len in range(1, len(pattern)):
            cur: Node = self.root
            node: Node | None = cur
            for tok in pattern[len(pattern) - match_len :]:
                kids = cur[_KIDS]
                node = kids.get(tok) if kids else None
                if node is None:
                    break
                cur = node
            if node is None:
                break  # no longer match exists either
            limit = min(max_spec_tokens, math.floor(match_len * max_spec_factor + 1e-6))
            draft, score = _follow(node, limit, min_token_prob)
            if score >= best_score:
                best, best_score = draft, score
        return best, best_score


def _follow(node: Node, limit: int, min_prob: float) -> tuple[list[int], float]:
    draft: list[int] = []
    prob, score = 1.0, 0.0
    while len(draft) < limit and node[_KIDS]:
        tok, child = max(node[_KIDS].items(), key=lambda kv: kv[1][_COUNT])
        prob *= child[_COUNT] / node[_COUNT]
        if prob < min_prob:
            break
        draft.append(tok)
        score += prob
        node = child
    return draft, score


class SuffixCache:
    """vLLM's SuffixDecodingCache: local trees per request, one global tree of responses."""

    def __init__(self, params: SuffixParams):
        self.p = params
        self.global_tree = SuffixTree(params.max_tree_depth)
        self._cached: deque[str] = deque()
        self._local: dict[str, SuffixTree] = {}
        self._context: dict[str, list[int]] = {}

    def start_request(self, req_id: str, prompt: Sequence[int]) -> None:
        tree = SuffixTree(self.p.max_tree_depth)
        tree.append("prompt", prompt)
        self._local[req_id] = tree
        self._context[req_id] = list(prompt)
        if self.p.max_cached_requests > 0:
            self._cached.append(req_id)
            while len(self._cached) > self.p.max_cached_requests:
                self.global_tree.remove(self._cached.popleft())

    def add_response(self, req_id: str, tokens: Sequence[int]) -> None:
        self._local[req_id].append("prompt", tokens)
        self._context[req_id].extend(tokens)
        if self.p.max_cached_requests > 0:
            self.global_tree.append(req_id, tokens)

    def stop_request(self, req_id: str) -> None:
        self._local.pop(req_id, None)
        self._context.pop(req_id, None)

    def speculate(self, req_id: str, max_model_len: int) -> list[int]:
        context = self._context[req_id]
        k = self.p.num_speculative_tokens or self.p.max_tree_depth
        max_spec = min(k, max_model_len - len(context) - 1)
        if max_spec <= 0:
            return []
        pattern = context[-self.p.max_tree_depth :]
        local, local_score = self._local[req_id].speculate(pattern, max_spec, self.p.max_spec_factor, self.p.min_token_prob)
        if self.p.max_cached_requests <= 0:
            return local
        glob, glob_score = self.global_tree.speculate(pattern, max_spec, self.p.max_spec_factor, self.p.min_token_prob)
        return local if local_score >= glob_score else glob
