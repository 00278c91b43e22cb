"""Arctic Inference's suffix tree (``csrc/suffix_decoding/suffix_tree.cc``), node for node, in pure Python. Pure.

The tree counts every substring of up to ``max_depth`` tokens of the sequences
appended to it, as Arctic's does; the answers are the same, the layout differs
so that Python does little work per token:

* A count-1 path is one *tail* node that points into its sequence (``_SEQ``,
  ``_POS``) and ends where the sequence ends (at most ``max_depth`` deep): the
  suffix that made it grows with its sequence at no cost. A later suffix that
  enters a tail materializes its first token only. (Arctic also compresses
  paths, but still visits every active suffix of a sequence on every token:
  here only the suffixes standing on materialized nodes, ``_Seq.working``, are
  visited, which on natural text is a few, not ``max_depth``.)
* A node's first child (``_HEAD``) is the first of the highest count in
  Arctic's sibling list. Among equal counts that list's order follows from
  where Arctic moves a child: a new child goes last; a child whose count rises
  becomes the first of its new count if it was the first of its old one, else
  the last; a child whose count falls becomes the first of its new count.
  ``_RANK`` encodes that order (``-t`` first, ``+t`` last, ``t`` a clock), and
  ``_GRP`` keeps per count a heap of (rank, child) whose top is the group's
  first; entries whose rank is no longer their child's are stale and dropped
  when they reach the top. The root's children are never drafted from, so the
  root keeps no order.
* Probabilities and scores are rounded to float32 as Arctic's C++ computes
  them; the division of two counts below 2**24 rounded from float64 equals the
  float32 division (double rounding is innocuous for 53 >= 2 * 24 + 2 bits).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from heapq import heappop, heappush
from typing import Any

_COUNT, _KIDS, _RANK, _GRP, _HEAD, _SEQ, _POS, _TOK, _DEPTH = range(9)
# [count, {token: Node} | None, rank, {count: heap} | None, first child, tail's tokens | None, pos, token, depth]
# _KIDS stays None until a second child comes (the only child is _HEAD): most nodes have one child, and a
# dict each cost ~25% of the text replay's local trees, built when a suffix splits a tail and freed at stop.
# A tail holds its sequence's token list, not the _Seq: no reference cycle, so a dropped tree is freed
# by reference counting alone.
Node = list[Any]
Where = tuple[Node | None, list[int] | None, int, int]  # locate's answer: node or (tail tokens, pos), depth
_EXACT = 1 << 24  # counts a float32 holds exactly

_F = array("f", [0.0])


def f32(x: float) -> float:
    """``x`` rounded to float32."""
    _F[0] = x
    return _F[0]


class _Seq:
    """One appended sequence: its tokens and the nodes of its suffixes that stand on materialized nodes."""

    __slots__ = ("tokens", "working")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.working: list[Node] = []


def _clean(heap: list[tuple[int, Node]]) -> None:
    while heap and heap[0][0] != heap[0][1][_RANK]:
        heappop(heap)


class SuffixTree:
    """Counts of every substring (up to ``max_depth`` tokens) of the sequences appended to it."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root: Node = [0, None, 0, None, None, None, 0, -1, 0]
        self._seqs: dict[str, _Seq] = {}
        self._owner: dict[int, _Seq] = {}  # id(tokens) -> its _Seq, for tails whose suffix grows again
        self._t = 1

    def seq(self, seq_id: str) -> _Seq | None:
        return self._seqs.get(seq_id)

    # -- building ---------------------------------------------------------------------------------------------

    def append(self, seq_id: str, tokens: Sequence[int]) -> None:
        s = self._seqs.get(seq_id)
        if s is None:
            s = self._seqs[seq_id] = _Seq()
            self._owner[id(s.tokens)] = s
        toks, root, depth, increment = s.tokens, self.root, self.max_depth, self._increment
        # The field indices as locals (LOAD_FAST, not a module global per subscript) and _increment's first case
        # inlined below: the text replay's global tree (76,800 tokens) 1.07 -> 0.90 s.
        COUNT, KIDS, GRP, HEAD, SEQ, POS, TOK, DEPTH = _COUNT, _KIDS, _GRP, _HEAD, _SEQ, _POS, _TOK, _DEPTH
        # One pass per token over the suffixes on materialized nodes, oldest first as in Arctic; the rest
        # stand in their own tails and grow with ``toks``. Materializing and an only child's increment are
        # inlined: on repetitive text every suffix walks someone else's tail, one call less each saves ~25%.
        n = len(toks)
        for tok in tokens:
            toks.append(tok)
            n += 1
            root[COUNT] += 1
            entries = s.working
            entries.append(root)
            grown: list[Node] = []
            s.working = grown
            keep = grown.append
            for node in entries:
                head = child = node[HEAD]  # on repetitive text the first child is the usual next step: no dict look-up
                if child is None or child[TOK] != tok:
                    kids = node[KIDS]
                    child = kids.get(tok) if kids is not None else None
                    if child is None:
                        d = node[DEPTH] + 1
                        if kids is None and head is None:  # (the root may have kids but no first child)
                            node[HEAD] = [1, None, 0, None, None, toks, n - 1, tok, d]
                        else:
                            t = self._t
                            self._t = t + 1
                            if kids is None:  # a second child: now the children need a dict
                                node[KIDS] = kids = {head[TOK]: head}
                            kids[tok] = leaf = [1, None, t, None, None, toks, n - 1, tok, d]
                            if node is not root:
                                grp = node[GRP]
                                if grp is None:
                                    first = node[HEAD]
                                    node[GRP] = grp = {first[COUNT]: [(first[_RANK], first)]}
                                self._push(node, grp, 1, leaf)
                        continue
                stoks = child[SEQ]
                if stoks is not None:  # a tail: its first token becomes a node, the rest stays a tail
                    child[SEQ] = None
                    d = child[DEPTH]
                    if d < depth:  # else the tail was this one token, at the depth limit
                        pos = child[POS] + 1
                        if pos < len(stoks):
                            nt = stoks[pos]
                            child[HEAD] = [1, None, 0, None, None, stoks, pos, nt, d + 1]
                        else:  # its own suffix stood at its end: grows from here
                            self._owner[id(stoks)].working.append(child)
                grp = node[GRP]
                if grp is None:  # an only child (or the root's): no order to keep
                    child[COUNT] += 1
                else:
                    c = child[COUNT]
                    heap = grp[c]
                    if len(heap) == 1 and c + 1 not in grp:  # alone at c and at c + 1: same place, same rank
                        grp[c + 1] = grp.pop(c)
                        child[COUNT] = c + 1
                    else:
                        increment(node, child)
                if child[DEPTH] < depth:
                    keep(child)

    def _push(self, parent: Node, grp: dict[int, list[tuple[int, Node]]], count: int, x: Node) -> None:
        heap = grp.get(count)
        if heap is None:
            grp[count] = [(x[_RANK], x)]
            return
        heappush(heap, (x[_RANK], x))
        if len(heap) > 2 * len(parent[_KIDS]) + 8:  # stale entries: rebuild from the live children
            live = [(k[_RANK], k) for k in parent[_KIDS].values() if k[_COUNT] == count]
            live.sort()
            heap[:] = live

    def _increment(self, parent: Node, x: Node) -> None:
        c = x[_COUNT]
        t = self._t
        self._t = t + 1
        grp = parent[_GRP]
        heap = grp[c]
        if len(heap) == 1 and c + 1 not in grp:  # alone at c and at c + 1: same place, same rank
            grp[c + 1] = grp.pop(c)
            x[_COUNT] = c + 1
            return
        if heap[0][1] is x:  # the first of its count: it becomes the first of the next
            heappop(heap)
            x[_RANK] = -t
            _clean(heap)
            if not heap:
                del grp[c]
        else:
            x[_RANK] = t
        x[_COUNT] = c + 1
        self._push(parent, grp, c + 1, x)
        head = parent[_HEAD]
        if head is not x and c + 1 >= head[_COUNT]:
            parent[_HEAD] = grp[c + 1][0][1]

    def _decrement(self, parent: Node, x: Node) -> None:
        c = x[_COUNT]
        t = self._t
        self._t = t + 1
        x[_COUNT] = c - 1
        grp = parent[_GRP]
        if grp is None:  # an only child: its rank orders it only once it has siblings, and any rank does
            return
        heap = grp[c]
        if len(heap) == 1 and c - 1 not in grp:  # alone at c and at c - 1: same place, same rank
            grp[c - 1] = grp.pop(c)
            return
        top = heap[0][1] is x
        x[_RANK] = -t  # the first of its new count
        if top:
            heappop(heap)
            _clean(heap)
            if not heap:
                del grp[c]
        self._push(parent, grp, c - 1, x)
        if parent[_HEAD] is x:
            rest = grp.get(c)
            parent[_HEAD] = rest[0][1] if rest else x

    def _delete(self, parent: Node, x: Node, tok: int) -> None:
        kids = parent[_KIDS]
        x[_RANK] = None  # any heap entry of x is stale now
        if kids is None:  # x was the only child
            parent[_HEAD] = parent[_GRP] = None
            return
        del kids[tok]
        if not kids:
            parent[_KIDS] = parent[_HEAD] = parent[_GRP] = None
            return
        grp = parent[_GRP]
        if grp is None:  # the root: its first child is only a look-up shortcut
            if parent[_HEAD] is x:
                parent[_HEAD] = None
            return
        heap = grp[1]
        if heap[0][1] is x:
            heappop(heap)
            _clean(heap)
            if not heap:
                del grp[1]
        if parent[_HEAD] is x:
            parent[_HEAD] = grp[1][0][1]

    def remove(self, seq_id: str) -> None:
        s = self._seqs.pop(seq_id, None)
        if s is None:
            return
        del self._owner[id(s.tokens)]
        toks, root, depth = s.tokens, self.root, self.max_depth
        for start in range(len(toks)):
            root[_COUNT] -= 1
            node = root
            for i in range(start, min(len(toks), start + depth)):
                tok = toks[i]
                kids = node[_KIDS]
                child = kids[tok] if kids is not None else node[_HEAD]
                if child[_COUNT] == 1:
                    self._delete(node, child, tok)
                    break
                if node is root:
                    child[_COUNT] -= 1
                else:
                    self._decrement(node, child)
                node = child
        s.working = []

    # -- reading ----------------------------------------------------------------------------------------------

    def locate(self, path: Sequence[int]) -> Where | None:
        """Where ``path`` ends: (node, None, 0, depth) on a node, (None, seq, pos, depth) inside a tail, None if absent."""
        node, d, n = self.root, 0, len(path)
        i = 0
        while i < n:
            kids = node[_KIDS]
            if kids is not None:
                child = kids.get(path[i])
                if child is None:
                    return None
            else:
                child = node[_HEAD]
                if child is None or child[_TOK] != path[i]:
                    return None
            i += 1
            d += 1
            if child[_SEQ] is not None:
                toks = child[_SEQ]
                pos, k = child[_POS], n - i
                end = min(len(toks), pos + self.max_depth - d + 1)
                if pos + 1 + k > end or toks[pos + 1 : pos + 1 + k] != list(path[i:]):
                    return None
                return None, toks, pos + k, d + k
            node = child
        return node, None, 0, d

    def count(self, path: Sequence[int]) -> int:
        """How many indexed suffixes start with ``path`` (the root's count for an empty one)."""
        where = self.locate(path)
        if where is None:
            return 0
        return int(where[0][_COUNT]) if where[0] is not None else 1

    def draft(self, where: Where, limit: int, min_prob: float) -> tuple[list[int], float]:
        """Arctic's ``_speculate_path`` from a ``locate`` result: first children while the probability holds."""
        node, s, pos, d = where
        if node is None:  # inside a tail: its own tokens, probability 1
            assert s is not None
            end = min(len(s), pos + self.max_depth - d + 1)
            out = s[pos + 1 : min(end, pos + 1 + limit)]
            return out, float(len(out))
        return self.follow(node, d, limit, min_prob)

    def follow(self, node: Node, d: int, limit: int, min_prob: float) -> tuple[list[int], float]:
        draft: list[int] = []
        prob, score = 1.0, 0.0
        f = _F
        COUNT, HEAD, SEQ, TOK, exact = _COUNT, _HEAD, _SEQ, _TOK, _EXACT  # locals, as in append
        left = limit
        while left > 0:
            head = node[HEAD]
            if head is None:
                break
            c = node[COUNT]
            if c < exact:
                f[0] = head[COUNT] / c
            else:
                f[0] = f32(head[COUNT]) / f32(c)
            f[0] = prob * f[0]
            prob = f[0]
            if prob < min_prob:
                break
            s = head[SEQ]
            if s is None:
                draft.append(head[TOK])
                f[0] = score + prob
                score = f[0]
                node = head
                d += 1
                left -= 1
                continue
            pos = head[_POS]
            end = min(len(s), pos + self.max_depth - d, pos + left)
            take = s[pos:end]
            draft += take
            for _ in take:
                f[0] = score + prob
                score = f[0]
            break
        return draft, score

    def speculate(
        self, pattern: Sequence[int], max_spec_tokens: int, max_spec_factor: float, min_token_prob: float
    ) -> tuple[list[int], float]:
        """Arctic's ``SuffixTree::speculate``: every match length shorter than the pattern, walked from the root."""
        best: list[int] = []
        best_score = 0.0
        factor, min_prob = f32(max_spec_factor), f32(min_token_prob)
        for match_len in range(1, len(pattern)):
            where = self.locate(pattern[len(pattern) - match_len :])
            if where is None:
                break
            draft, score = self.draft(where, spec_limit(match_len, factor, max_spec_tokens), min_prob)
            if score >= best_score:
                best, best_score = draft, score
        return best, best_score


def spec_limit(match_len: int, factor: float, max_spec_tokens: int) -> int:
    """``min(max_spec_tokens, int(match_len * max_spec_factor + 1e-6))``, the product in float32 as in Arctic."""
    return max(0, min(max_spec_tokens, int(f32(match_len * factor) + 1e-6)))
