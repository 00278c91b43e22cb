"""'Speculation helps up to QPS X, hurts from QPS Y': read off the per-level statuses, and only when they cross."""

from __future__ import annotations

from specguard.verdict.load_range import help_hurt_lines
from tests.unit.verdict.test_decide import SAME, cell, rr

BETTER, WORSE = rr(0.7, 0.6, 0.8), rr(1.4, 1.3, 1.5)
UNSURE = rr(0.7, 0.6, 0.8, enough=False)


def _levels(*objectives):
    return [cell(obj=o, traffic=f"qps{load}", load=float(load)) for load, o in objectives]


def test_a_crossing_range_is_named_at_its_last_helping_and_first_hurting_level():
    cells = _levels((1, BETTER), (4, BETTER), (8, WORSE), (12, WORSE))
    rates = {c.traffic for c in cells}
    assert help_hurt_lines(cells, False, rates) == ["prod / chat: speculation helps up to QPS 4, hurts from QPS 8"]


def test_levels_in_between_and_unjudged_ones_are_named_and_decide_nothing():
    cells = _levels((1, UNSURE), (4, BETTER), (8, SAME), (12, WORSE))
    (line,) = help_hurt_lines(cells, False, {c.traffic for c in cells})
    assert line.startswith("prod / chat: speculation helps up to QPS 4, hurts from QPS 12")
    assert "QPS 1 inconclusive" in line and "QPS 8 no detectable difference" in line


def test_no_line_unless_it_helps_at_the_low_end_and_hurts_at_the_high_end():
    rates = {f"qps{x}" for x in (1, 4, 8)}
    assert help_hurt_lines(_levels((1, BETTER), (4, BETTER), (8, SAME)), False, rates) == []
    assert help_hurt_lines(_levels((1, SAME), (4, WORSE), (8, WORSE)), False, rates) == []
    # a level that hurts below one that helps is no crossing range: the hurting end must be the top
    assert help_hurt_lines(_levels((1, BETTER), (4, WORSE), (8, BETTER)), False, rates) == []


def test_a_load_that_is_not_a_rate_is_not_called_qps():
    cells = _levels((1, BETTER), (8, WORSE))
    (line,) = help_hurt_lines(cells, False, {"qps1"})
    assert "helps up to offered load 1, hurts from offered load 8" in line


def test_higher_is_better_objectives_read_the_ratio_the_other_way():
    cells = _levels((1, WORSE), (8, BETTER))  # a throughput ratio above 1 is better
    assert help_hurt_lines(cells, True, {"qps1", "qps8"}) == ["prod / chat: speculation helps up to QPS 1, hurts from QPS 8"]


def test_the_crossover_is_said_once_per_group_by_its_range_else_by_its_bracket():
    from specguard.verdict.load_range import crossover_lines

    crossing = _levels((1, BETTER), (4, BETTER), (8, WORSE))
    rates = {c.traffic for c in crossing}
    # both the range and the bracket exist for this group: only the range is said (it was said twice, issue 29)
    assert crossover_lines(crossing, False, rates) == ["prod / chat: speculation helps up to QPS 4, hurts from QPS 8"]
    # paid, then no detectable difference: no range, so the bracket says it
    (line,) = crossover_lines(_levels((1, BETTER), (4, SAME)), False, rates)
    assert "stops paying at 'qps4'" in line and "between offered load 1 and 4" in line
