"""Greedy-output comparison: first divergence, matching by prompt item, the baseline's own variation, the text fallback."""

from __future__ import annotations

from specguard.analysis.equivalence import Output, equivalence_by_segment, first_divergence, segment_equivalence


def out(item: int, ids: list[int] | None, rep: int = 1, seq: int = 0, segment: str = "chat", text: str | None = None) -> Output:
    return Output(item=item, rep=rep, seq=seq, segment=segment, token_ids=tuple(ids) if ids is not None else None, text=text)


def test_first_divergence_is_the_first_differing_position_or_the_shorter_length() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence("abc", "abd") == 2


def test_candidate_and_baseline_repeats_are_compared_with_the_baseline_reference() -> None:
    base = [out(0, [1, 2, 3, 4], rep=1, seq=0), out(1, [5, 6, 7, 8], rep=1, seq=1), out(0, [1, 2, 3, 4], rep=2, seq=0)]
    base.append(out(1, [5, 6, 0, 0], rep=2, seq=1))  # the baseline itself varies on item 1, from token 2
    cand = [out(0, [1, 2, 3, 9], seq=0), out(1, [5, 6, 7, 8], seq=1), out(0, [1, 2, 3, 4], rep=2, seq=3)]
    eq = segment_equivalence(base, cand, "chat")
    assert eq.unit == "tokens" and eq.prompts == 2 and eq.note is None
    assert (eq.baseline.compared, eq.baseline.differing, eq.baseline.first_divergence_median) == (2, 1, 2.0)
    assert (eq.candidate.compared, eq.candidate.differing, eq.candidate.first_divergence_median) == (3, 1, 3.0)
    assert eq.candidate.share == 1 / 3


def test_items_that_share_a_file_line_are_told_apart_and_items_without_reference_are_left_out() -> None:
    # turns: all makes several items of one conversation line: they are different prompts, matched by item
    base = [out(0, [1, 1]), out(1, [2, 2], seq=1)]
    cand = [out(0, [1, 1]), out(1, [2, 2], seq=1), out(7, [3, 3], seq=2)]
    eq = segment_equivalence(base, cand, "chat")
    assert eq.candidate.compared == 2 and eq.candidate.differing == 0
    assert eq.baseline.compared == 0 and eq.baseline.share is None  # one request per prompt: no own variation


def test_without_token_ids_outputs_are_compared_as_text_and_the_result_says_so() -> None:
    base = [out(0, None, text="the cat sat"), out(0, None, rep=2, text="the cat sat")]
    cand = [out(0, None, text="the cat ran")]
    eq = segment_equivalence(base, cand, "chat")
    assert eq.unit == "characters" and eq.note is not None and "compared as text" in eq.note
    assert "baseline and candidate" in eq.note
    assert eq.candidate.first_divergence_min == 8 and eq.baseline.differing == 0


def test_distribution_of_first_divergence_and_segments_apart() -> None:
    base = [out(i, list(range(20)), seq=i) for i in range(5)] + [out(9, [0], seq=9, segment="code")]
    cand = [out(i, list(range(i * 3)) + [99] * 5, seq=i) for i in range(5)] + [out(9, [0], seq=9, segment="code")]
    by = equivalence_by_segment(base, cand)
    assert sorted(by) == ["chat", "code"]
    chat = by["chat"].candidate
    assert chat.differing == 5 and chat.first_divergence_min == 0 and chat.first_divergence_max == 12
    assert chat.first_divergence_quantiles["p50"] == chat.first_divergence_median == 6.0
    assert by["code"].candidate.differing == 0
