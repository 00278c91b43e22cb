"""The proposers and the replay on cases computed by hand."""

from __future__ import annotations

from specguard.proposers import (
    SuffixCache,
    SuffixParams,
    SuffixTree,
    ngram_propose,
    replay_ngram,
    replay_suffix,
)


def test_ngram_longest_match_earliest_occurrence_and_short_tail() -> None:
    #        0  1  2  3  4  5  6  7  8  9
    ctx = [1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 3]
    # the suffix [1 2 3] occurs at 0 and 4: the earliest wins, so the draft continues from 3 -> [9, 1, 2]
    assert ngram_propose(ctx, 1, 3, 3, 1000) == [9, 1, 2]
    # longer n is preferred: [8 1 2 3]? no; suffix [3 8 1 2 3] not found; max 3 gives the same
    assert ngram_propose(ctx, 2, 5, 2, 1000) == [9, 1]
    # near the end: the match [5 6] at 1 leaves one token after it before the suffix itself
    assert ngram_propose([4, 5, 6, 5, 6], 2, 2, 5, 1000) == [5, 6]
    assert ngram_propose([7, 7], 1, 1, 4, 1000) == [7]  # overlapping the suffix is allowed
    assert ngram_propose([1, 2], 3, 4, 4, 1000) == []  # shorter than min_n
    assert ngram_propose(ctx, 1, 3, 3, len(ctx) + 1) == [9]  # k capped by max_model_len
    assert ngram_propose(ctx, 1, 3, 3, len(ctx)) == []
    assert ngram_propose([1, 2, 3, 4], 1, 2, 3, 100) == []  # nothing repeats


def test_ngram_replay_counts_as_vllm_does() -> None:
    prompt = [1, 2, 3, 4]
    output = [1, 2, 3, 4, 5]
    s = replay_ngram(prompt, output, 1, 2, 3, 1000)
    # prefill samples 1; context [1 2 3 4 1] drafts [2 3 4]: all accepted, bonus 5 -> done in one decode step
    assert (s.steps, s.drafts, s.draft_tokens, s.accepted, s.accepted_per_pos) == (1, 1, 3, 3, [1, 1, 1])
    assert s.baseline_steps == 4 and s.step_reduction == 0.75 and s.mean_acceptance_length == 4.0
    miss = replay_ngram([1, 2, 3, 4], [9, 8, 7], 1, 2, 3, 1000)
    # no n-gram of [.. 4 9] repeats, then [.. 9 8] neither: no drafts, one step per token
    assert (miss.steps, miss.drafts, miss.acceptance_rate, miss.draft_fraction) == (2, 0, None, 0.0)
    partial = replay_ngram([5, 6, 7, 5], [6, 1, 2], 1, 3, 2, 1000)
    # context [5 6 7 5 6]: [5 6] matched at 0 -> draft [7 5]; actual [1 2]: 0 accepted, one token per step
    assert (partial.drafts, partial.draft_tokens, partial.accepted, partial.steps) == (1, 2, 0, 2)
    total = s.add(miss).add(partial)
    assert total.requests == 3 and total.accepted == 3 and total.accepted_per_pos == [1, 1, 1]


def test_suffix_tree_counts_and_removal() -> None:
    tree = SuffixTree(max_depth=3)
    tree.append("a", [1, 2, 1, 2])

    def count(*path: int) -> int:
        return tree.count(path)

    assert count(1) == 2 and count(1, 2) == 2 and count(2, 1, 2) == 1  # a depth-3 path
    assert count(1, 2, 1, 2) == 0  # nothing deeper than 3
    draft, score = tree.speculate([1, 2, 1], max_spec_tokens=4, max_spec_factor=1.0, min_token_prob=0.1)
    # match [2 1] (len 2): next 2 (p=1), then nothing deeper: draft [2], score 1.0; match [1] (len 1): [2] too
    assert draft == [2] and score == 1.0
    tree.remove("a")
    assert count() == 0 and count(1) == 0 and count(2) == 0


def test_suffix_global_tree_learns_from_earlier_responses() -> None:
    cache = SuffixCache(SuffixParams(max_tree_depth=8, num_speculative_tokens=4, min_token_prob=0.1))
    answer = [10, 11, 12, 13, 14, 15]
    first = replay_suffix(cache, "r1", [1, 2], answer, 1000)
    second = replay_suffix(cache, "r2", [3, 4], answer, 1000)
    assert first.accepted == 0  # nothing to learn from yet
    assert second.accepted > 0 and second.steps < first.steps  # the first response is in the global tree
    no_global = SuffixCache(SuffixParams(max_tree_depth=8, num_speculative_tokens=4, max_cached_requests=0))
    replay_suffix(no_global, "r1", [1, 2], answer, 1000)
    assert replay_suffix(no_global, "r2", [3, 4], answer, 1000).accepted == 0


def test_fast_ngram_replay_equals_the_step_by_step_replay_on_random_requests() -> None:
    """The replay inlines the proposal for speed; it must count exactly what drafting with the KMP port counts."""
    import random

    from specguard.proposers.replay import replay

    rng = random.Random(3)
    for _ in range(1500):
        vocab = rng.choice([2, 3, 10])
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(0, 50))]
        output = [rng.randrange(vocab) for _ in range(rng.randint(0, 60))]
        lo = rng.randint(1, 3)
        hi, k = rng.randint(lo, 5), rng.randint(1, 5)
        mml = rng.choice([10**6, len(prompt) + len(output) // 2 + 1, len(prompt) + 2])
        seq = prompt + output
        slow = replay(prompt, output, lambda pos: ngram_propose(seq[:pos], lo, hi, k, mml))  # noqa: B023
        assert replay_ngram(prompt, output, lo, hi, k, mml) == slow
