"""vLLM V1's n-gram proposer (prompt lookup), exactly as 0.10.1 to 0.33 behave. Pure.

``ngram_propose`` is a line-by-line port of vLLM's
``_find_longest_matched_ngram_and_propose_tokens`` (KMP on the reversed
context): the longest suffix n-gram with n in [min_n, max_n] that occurs
earlier in the context, the earliest such occurrence, and up to k tokens
after it, fewer near the end of the context, none past max_model_len.

``NgramIndex`` gives the same answers for a context that only grows (one
request being replayed), in constant time per step instead of a scan of the
whole context: it remembers, for every n, where each n-gram first ended.
"""

from __future__ import annotations

from collections.abc import Sequence

# n-grams are packed into one int, 32 bits a token: exact for any vocabulary below 2**32.
_SHIFT = 32


def ngram_propose(tokens: Sequence[int], min_n: int, max_n: int, k: int, max_model_len: int) -> list[int]:
    """The draft vLLM's n-gram proposer makes for one request whose context is ``tokens``."""
    total = len(tokens)
    if total < min_n:
        return []
    k = min(k, max_model_len - total)
    if k <= 0:
        return []
    rev = list(reversed(tokens))
    # lps[i]: longest proper prefix of rev that ends at i, kept for the first max_n positions only.
    lps = [0] * max_n
    longest = 0
    position = 0
    prev = 0
    i = 1
    while i < total:
        if rev[prev] == rev[i]:
            prev += 1
            if prev >= longest:  # ">=": the later reversed position is the earlier original occurrence
                longest = prev
                position = i
            if i < max_n:
                lps[i] = prev
            if prev == max_n:
                prev = lps[max_n - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_n:
        return []
    start = total - 1 - position + longest
    k = min(k, total - start)
    return list(tokens[start:start + k])


class NgramIndex:
    """Earliest end position of every n-gram (min_n <= n <= max_n) seen so far in a growing context."""

    def __init__(self, min_n: int, max_n: int):
        self.min_n = min_n
        self.max_n = max_n
        self.tokens: list[int] = []
        self._first_end: list[dict[int, int]] = [{} for _ in range(max_n + 1)]
        self._indexed = 0  # n-grams ending before this position are in the index

    def extend(self, new_tokens: Sequence[int]) -> None:
        self.tokens.extend(new_tokens)

    def _index_until(self, end: int) -> None:
        """Index the n-grams that end at positions < ``end``."""
        toks, first, lo, hi = self.tokens, self._first_end, self.min_n, self.max_n
        for p in range(self._indexed, end):
            key = 0
            for n in range(1, min(hi, p + 1) + 1):
                key |= toks[p - n + 1] << (_SHIFT * (n - 1))
                if n >= lo:
                    first[n].setdefault(key, p)
        self._indexed = max(self._indexed, end)

    def propose(self, k: int, max_model_len: int) -> list[int]:
        """The draft for the current context (``self.tokens``); same answer as ``ngram_propose``."""
        return self.propose_at(len(self.tokens), k, max_model_len)

    def propose_at(self, total: int, k: int, max_model_len: int) -> list[int]:
        """The draft for the context ``tokens[:total]``; the index may already hold later tokens (a sweep shares it)."""
        toks = self.tokens
        if total < self.min_n:
            return []
        k = min(k, max_model_len - total)
        if k <= 0:
            return []
        # Occurrences may overlap the suffix but must end before the last token.
        self._index_until(total - 1)
        key = 0
        best_end = -1
        for n in range(1, min(self.max_n, total) + 1):
            key |= toks[total - n] << (_SHIFT * (n - 1))
            if n >= self.min_n:
                end = self._first_end[n].get(key)
                if end is None or end > total - 2:
                    break  # no occurrence of this n-gram, so none of any longer one
                best_end = end
        if best_end < 0:
            return []
        start = best_end + 1
        return toks[start:start + min(k, total - start)]


def _min_gram_keys(tokens: list[int], n: int) -> list[int]:
    """keys[j] packs tokens[j : j + n], the n-gram ending at j + n - 1."""
    keys = tokens
    for shift in range(1, n):
        keys = [(a << _SHIFT) | b for a, b in zip(keys, tokens[shift:])]
    return keys


class KnownSequenceDrafts:
    """n-gram drafts for every prefix of one sequence known in full (a logged request), from ``first`` tokens on.

    The same answers as ``ngram_propose(tokens[:L], ...)`` for each L, found faster for a replay: only the
    places whose shortest n-gram (min_n tokens) also ends a queried prefix are kept, and a query extends
    those candidates backwards up to max_n, earliest first, stopping at the first full-length match.
    """

    def __init__(self, tokens: Sequence[int], min_n: int, max_n: int, first: int):
        self.tokens = tokens if isinstance(tokens, list) else list(tokens)
        self.min_n, self.max_n = min_n, max_n
        keys = self._keys = _min_gram_keys(self.tokens, min_n) if len(self.tokens) >= min_n else []
        queried = set(keys[max(0, first - min_n):])
        candidates = [j for j, key in enumerate(keys) if key in queried]
        ends: dict[int, list[int]] = {}
        last = min_n - 1
        for j in candidates:
            ends.setdefault(keys[j], []).append(j + last)
        self._ends = ends

    def propose_at(self, total: int, k: int, max_model_len: int) -> list[int]:
        min_n, max_n, toks = self.min_n, self.max_n, self.tokens
        if total < min_n:
            return []
        k = min(k, max_model_len - total)
        if k <= 0:
            return []
        candidates = self._ends.get(self._keys[total - min_n])
        if not candidates:
            return []
        best_len, best_end, tail = 0, -1, total - 1
        for end in candidates:
            if end >= tail:
                break  # sorted: the rest end at or after the suffix itself
            m = min_n
            while m < max_n and end - m >= 0 and toks[end - m] == toks[tail - m]:
                m += 1
            if m > best_len:
                best_len, best_end = m, end
                if m == max_n:
                    break
        if best_end < 0:
            return []
        start = best_end + 1
        return toks[start:start + min(k, total - start)]
