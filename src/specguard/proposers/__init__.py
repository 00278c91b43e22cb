"""Draft proposers re-implemented for offline replay: vLLM's n-gram and Arctic Inference's suffix decoding."""

from specguard.proposers.ngram import KnownSequenceDrafts, ngram_propose
from specguard.proposers.replay import ReplayStats, replay_ngram, replay_suffix
from specguard.proposers.suffix import SuffixCache, SuffixParams, SuffixTree

__all__ = [
    "KnownSequenceDrafts",
    "ReplayStats",
    "SuffixCache",
    "SuffixParams",
    "SuffixTree",
    "ngram_propose",
    "replay_ngram",
    "replay_suffix",
]
