"""Suffix decoding (Arctic Inference, vLLM ``method="suffix"`` from 0.12), re-implemented for replay. Pure.

Matches Arctic Inference's ``SuffixDecodingCache`` (arctic-inference 0.1.1,
``csrc/suffix_decoding/suffix_tree.cc``) driven as vLLM's
``SuffixDecodingProposer`` drives it: tests/integration/test_suffix_exactness.py
compares the drafts of both at every step. What exactness takes:

* Per request a tree over prompt and output, one global tree over responses,
  suffixes indexed up to ``max_tree_depth`` tokens; FIFO eviction past
  ``max_cached_requests`` (0: no global tree); a response grows in the global
  tree only while it is still cached there.
* For every match length shorter than the pattern (the last ``max_tree_depth``
  tokens), the path of first children is drafted while the running
  probability stays at or above ``min_token_prob``, at most
  ``int(match_len * max_spec_factor + 1e-6)`` tokens; the highest score (sum of
  the running probabilities) wins, ties to the longer match, and the local tree
  wins ties against the global one. Probabilities and scores are float32.
* The first child is the first of the highest count in Arctic's sibling list,
  whose order among equal counts follows from where a child moves: a new
  child goes last; a child whose count rises becomes the first of its new
  count if it was the first of its old one, else the last; a child whose count
  falls becomes the first of its new count. ``_RANK`` encodes that order.
* vLLM's rule at ``max_model_len``: a request at the limit adds nothing and
  drafts nothing; it is started only with its first tokens under the limit.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel


class SuffixParams(BaseModel):
    max_tree_depth: int = 24
    max_cached_requests: int = 10_000
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1
    num_speculative_tokens: int | None = None  # None: the tree depth, as vLLM defaults it


_F32 = array("f", [0.0])


def f32(x: float) -> float:
    """``x`` rounded to float32, as Arctic's C++ holds probabilities and scores."""
    _F32[0] = x
    return _F32[0]


_COUNT, _KIDS, _RANK = 0, 1, 2
Node = list[Any]


class SuffixTree:
    """Counts of every substring (up to ``max_depth`` tokens) of the sequences appended to it."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root: Node = [0, None, 0]
        self._seqs: dict[str, list[int]] = {}
        self._active: dict[str, list[Node]] = {}
        self._t = 1

    def count(self, path: Sequence[int]) -> int:
        """How many indexed suffixes start with ``path`` (the root's count for an empty one)."""
        node: Node | None = self.root
        for tok in path:
            kids = node[_KIDS] if node is not None else None
            node = kids.get(tok) if kids else None
            if node is None:
                return 0
        assert node is not None
        return int(node[_COUNT])

    def _first(self, parent: Node, x: Node) -> bool:
        c, r = x[_COUNT], x[_RANK]
        return all(y[_RANK] >= r for y in parent[_KIDS].values() if y[_COUNT] == c)

    def append(self, seq_id: str, tokens: Sequence[int]) -> None:
        seq = self._seqs.setdefault(seq_id, [])
        active = self._active.setdefault(seq_id, [])
        root, depth = self.root, self.max_depth
        for tok in tokens:
            seq.append(tok)
            active.append(root)
            root[_COUNT] += 1
            grown = []
            length = len(active)
            for node in active:
                kids = node[_KIDS]
                if kids is None:
                    kids = node[_KIDS] = {}
                child = kids.get(tok)
                if child is None:
                    child = kids[tok] = [1, None, self._t]
                else:
                    front = node is not root and self._first(node, child)
                    child[_COUNT] += 1
                    child[_RANK] = -self._t if front else self._t
                self._t += 1
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
                if child[_COUNT] == 1:
                    del node[_KIDS][tok]
                    break
                child[_COUNT] -= 1
                child[_RANK] = -self._t
                self._t += 1
                node = child

    def speculate(
        self, pattern: Sequence[int], max_spec_tokens: int, max_spec_factor: float, min_token_prob: float
    ) -> tuple[list[int], float]:
        best: list[int] = []
        best_score = 0.0
        factor, min_prob = f32(max_spec_factor), f32(min_token_prob)
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
                break
            limit = max(0, min(max_spec_tokens, int(f32(match_len * factor) + 1e-6)))
            draft, score = _follow(node, limit, min_prob)
            if score >= best_score:
                best, best_score = draft, score
        return best, best_score


def _follow(node: Node, limit: int, min_prob: float) -> tuple[list[int], float]:
    draft: list[int] = []
    prob, score = 1.0, 0.0
    while len(draft) < limit and node[_KIDS]:
        tok, child = min(node[_KIDS].items(), key=lambda kv: (-kv[1][_COUNT], kv[1][_RANK]))
        prob = f32(prob * f32(child[_COUNT] / node[_COUNT]))
        if prob < min_prob:
            break
        draft.append(tok)
        score = f32(score + prob)
        node = child
    return draft, score


class SuffixCache:
    """vLLM's SuffixDecodingCache: local trees per request, one global tree of responses."""

    def __init__(self, params: SuffixParams):
        self.p = params
        self.global_tree = SuffixTree(params.max_tree_depth)
        self._k = params.num_speculative_tokens or params.max_tree_depth
        self._cached: dict[str, None] = {}
        self._local: dict[str, SuffixTree] = {}
        self._prompt: dict[str, list[int]] = {}
        self._context: dict[str, list[int]] = {}

    def start_request(self, req_id: str, prompt: Sequence[int]) -> None:
        self._prompt[req_id] = list(prompt)
        self._context[req_id] = list(prompt)

    def _ensure_started(self, req_id: str) -> None:
        if req_id in self._local:
            return
        tree = SuffixTree(self.p.max_tree_depth)
        tree.append("s", self._prompt[req_id])
        self._local[req_id] = tree
        if self.p.max_cached_requests != 0:
            if req_id in self._cached:
                del self._cached[req_id]
                self.global_tree.remove(req_id)
            self._cached[req_id] = None
            if self.p.max_cached_requests > 0:
                while len(self._cached) > self.p.max_cached_requests:
                    old = next(iter(self._cached))
                    del self._cached[old]
                    self.global_tree.remove(old)

    def add_response(self, req_id: str, tokens: Sequence[int], max_model_len: int | None = None) -> None:
        context = self._context[req_id]
        context.extend(tokens)
        if max_model_len is not None and len(context) >= max_model_len:
            return
        self._ensure_started(req_id)
        self._local[req_id].append("s", tokens)
        if req_id in self._cached:
            self.global_tree.append(req_id, tokens)

    def stop_request(self, req_id: str) -> None:
        self._local.pop(req_id, None)
        self._prompt.pop(req_id, None)
        self._context.pop(req_id, None)

    def speculate(self, req_id: str, max_model_len: int) -> list[int]:
        context = self._context[req_id]
        n = len(context)
        if n >= max_model_len:
            return []
        self._ensure_started(req_id)
        max_spec = min(self._k, max_model_len - n - 1)
        pattern = context[-self.p.max_tree_depth :]
        args = (max_spec, self.p.max_spec_factor, self.p.min_token_prob)
        local, local_score = self._local[req_id].speculate(pattern, *args)
        glob, glob_score = self.global_tree.speculate(pattern, *args)
        return local if local_score >= glob_score else glob
