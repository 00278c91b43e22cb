"""vLLM V1's n-gram proposer (prompt lookup), exactly as 0.10.1 to 0.33 behave. Pure.

``ngram_propose`` is a line-by-line port of vLLM's
``_find_longest_matched_ngram_and_propose_tokens`` (KMP on the reversed
context): the longest suffix n-gram with n in [min_n, max_n] that occurs
earlier in the context, the earliest such occurrence, and up to k tokens
after it, fewer near the end of the context, none past max_model_len.

``KnownSequenceDrafts`` gives the same answers for every prefix of one
logged request, without rescanning the context at every step.
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
    return list(tokens[start : start + k])


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
        keys = self.keys = _min_gram_keys(self.tokens, min_n) if len(self.tokens) >= min_n else []
        queried = set(keys[max(0, first - min_n) :])
        candidates = [j for j, key in enumerate(keys) if key in queried]
        starts: dict[int, list[int]] = {}
        for j in candidates:
            starts.setdefault(keys[j], []).append(j)
        self.starts = starts

    def propose_at(self, total: int, k: int, max_model_len: int) -> list[int]:
        min_n, max_n, toks = self.min_n, self.max_n, self.tokens
        if total < min_n:
            return []
        k = min(k, max_model_len - total)
        if k <= 0:
            return []
        starts = self.starts.get(self.keys[total - min_n])
        if not starts:
            return []
        best_len, best_end, tail, last = 0, -1, total - 1, min_n - 1
        for begin in starts:
            end = begin + last
            if end >= tail:
                break  # in position order: the rest end at or after the suffix itself
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
        return toks[start : start + min(k, total - start)]
