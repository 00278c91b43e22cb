"""Greedy-output divergence (warning; guardrail when asked) and the goodput-drop guardrail, in the verdict."""

from __future__ import annotations

from specguard.analysis.equivalence import DivergenceStats, SegmentEquivalence
from specguard.check.plan import Equivalence, Guardrails, Objective
from specguard.verdict import decide
from tests.unit.verdict.test_decide import cell, codes, rr


def eq(base: tuple[int, int], cand: tuple[int, int], note: str | None = None) -> SegmentEquivalence:
    """(differing, compared) per arm."""

    def stats(d: int, n: int) -> DivergenceStats:
        return DivergenceStats(compared=n, differing=d, share=d / n if n else None, first_divergence_median=5.0 if d else None)

    return SegmentEquivalence(segment="chat", unit="tokens", prompts=50, baseline=stats(*base), candidate=stats(*cand), note=note)


GUARD = Equivalence(guardrail=True, max_extra_divergence=0.05)


def warned(v) -> list[str]:
    return [w for w in v.warnings if "greedy outputs" in w]


def test_a_candidate_that_diverges_more_than_the_baseline_varies_is_a_warning_not_a_verdict() -> None:
    v = decide([cell(equivalence=eq((2, 200), (60, 200)))], Objective(), Guardrails())
    assert v.verdict == "GO" and len(warned(v)) == 1 and "60/200 candidate" in warned(v)[0]


def test_equal_background_variation_on_both_arms_is_no_warning_and_no_nogo() -> None:
    c = cell(equivalence=eq((10, 200), (12, 200)))
    for rule in (None, Equivalence(guardrail=True, max_extra_divergence=0.1)):
        v = decide([c], Objective(), Guardrails(), equivalence=rule)
        assert warned(v) == [] and v.verdict == "GO", v.reasons


def test_as_a_guardrail_divergence_beyond_the_budget_is_nogo() -> None:
    v = decide([cell(equivalence=eq((2, 400), (120, 400)))], Objective(), Guardrails(), equivalence=GUARD)
    assert v.verdict == "NO-GO" and codes(v) == ["output_diverged"]
    assert v.reasons[0].numbers["differing_candidate"] == 120


def test_as_a_guardrail_an_interval_straddling_the_budget_is_inconclusive() -> None:
    v = decide([cell(equivalence=eq((0, 40), (3, 40)))], Objective(), Guardrails(), equivalence=GUARD)
    assert v.verdict == "INCONCLUSIVE" and codes(v) == ["output_divergence_unresolved"]
    assert v.reasons[0].numbers["more_requests_needed"] > 0


def test_without_the_baseline_own_variation_the_guardrail_is_unverified() -> None:
    v = decide([cell(equivalence=eq((0, 0), (0, 100)))], Objective(), Guardrails(), equivalence=GUARD)
    assert v.verdict == "INCONCLUSIVE" and codes(v) == ["guardrail_unverified"]
    assert "repetitions >= 2" in v.reasons[0].text


def test_text_fallback_note_reaches_the_warnings() -> None:
    v = decide([cell(equivalence=eq((0, 10), (0, 10), note="outputs compared as text"))], Objective(), Guardrails())
    assert any("outputs compared as text" in w for w in v.warnings)


def with_goodput(ratio):
    return cell(metrics={"goodput": {"rate": ratio}})


def test_goodput_guardrail_statuses_become_reasons() -> None:
    g = Guardrails(max_goodput_drop=0.05)
    assert decide([with_goodput(rr(1.0, 0.97, 1.03))], Objective(), g).verdict == "GO"
    beyond = decide([with_goodput(rr(0.7, 0.65, 0.75))], Objective(), g)
    assert beyond.verdict == "NO-GO" and codes(beyond) == ["goodput_dropped"]
    straddles = decide([with_goodput(rr(0.96, 0.9, 1.02))], Objective(), g)
    assert straddles.verdict == "INCONCLUSIVE" and codes(straddles) == ["goodput_unresolved"]
    few = decide([with_goodput(rr(1.0, 0.5, 2.0, enough=False, more=300))], Objective(), g)
    assert few.verdict == "INCONCLUSIVE" and codes(few) == ["guardrail_unverified"]
    # no budget: no goodput guardrail, whatever the ratio
    assert decide([with_goodput(rr(0.7, 0.65, 0.75))], Objective(), Guardrails()).verdict == "GO"


def test_goodput_beyond_in_one_cell_of_many_is_held_to_holm() -> None:
    # one-sided p of about 0.006 against the x0.95 bound: rejected among one cell's 4 guardrail tests
    # (Holm's first threshold 0.05 / 4), not among four cells' 16 (0.05 / 16): the same family as the others
    cells = [with_goodput(rr(1.0, 0.97, 1.03)) for _ in range(3)]
    marginal = with_goodput(rr(0.90, 0.863, 0.939))
    cells.append(marginal.model_copy(update={"traffic": "burst"}))
    v = decide(cells, Objective(), Guardrails(max_goodput_drop=0.05))
    assert v.verdict == "INCONCLUSIVE" and codes(v) == ["goodput_unresolved"]
    alone = decide([marginal], Objective(), Guardrails(max_goodput_drop=0.05))
    assert alone.verdict == "NO-GO" and codes(alone) == ["goodput_dropped"]
