"""``check --dry-run``: requests per cell, totals and the time estimate, from the plan alone."""

import math

import pytest

from specguard.check.dry_run import ASSUMED_ITL_MS, ASSUMED_TTFT_MS, dry_run, render_dry_run
from specguard.check.plan import CheckPlan, load_plan
from specguard.demo import DEMO_PLAN, demo_notes


def plan(traffic: list[dict[str, object]], repetitions: int = 2, max_tokens: int = 10) -> CheckPlan:
    return CheckPlan.model_validate(
        {
            "arms": {
                "baseline": {"endpoint": {"base_url": "http://a:1", "model": "m"}},
                "candidate": {"endpoint": {"base_url": "http://b:1", "model": "m"}},
            },
            "traffic": traffic,
            "sampling": [{"name": "greedy", "temperature": 0}, {"name": "hot", "temperature": 1}],
            "prompts": [{"source": "synthetic:short"}],
            "repetitions": repetitions,
            "max_tokens": max_tokens,
        }
    )


def test_open_loop_time_is_requests_over_rate_and_totals_cover_both_arms():
    d = dry_run(plan([{"name": "steady", "rate": 4, "num_requests": 40, "target": True}]))
    request_s = (ASSUMED_TTFT_MS + 10 * ASSUMED_ITL_MS) / 1000
    (lv,) = d.levels
    assert lv.per_run == 40 and lv.planned == 80
    assert lv.run_s == pytest.approx(40 / 4 + request_s)
    # 2 arms x 2 repetitions x 2 sampling settings x 1 prompt source runs of 40 requests each
    assert d.total_requests == 2 * 2 * 2 * 40
    assert d.total_s == pytest.approx(8 * lv.run_s)


def test_an_imported_baseline_halves_the_totals_and_says_so():
    p = plan([{"name": "steady", "rate": 4, "num_requests": 40, "target": True}])
    both, candidate_only = dry_run(p), dry_run(p, baseline_imported=True)
    assert candidate_only.arms_measured == 1 and candidate_only.total_requests == both.total_requests // 2
    assert candidate_only.total_s == pytest.approx(both.total_s / 2)
    total = next(ln for ln in render_dry_run(candidate_only, ["greedy", "hot"], 1) if ln.startswith("total:"))
    assert total.startswith("total: 160 requests over the candidate (the baseline is imported, not measured)")


def test_closed_loop_uses_the_stated_assumption_and_duration_only_is_unknown_count():
    d = dry_run(
        plan(
            [
                {"name": "c", "concurrency": 4, "num_requests": 10, "target": True},
                {"name": "long", "concurrency": 2, "duration_s": 30},
            ]
        )
    )
    c, long = d.levels
    assert c.assumed and c.run_s == pytest.approx(3 * d.assumed_request_s)  # ceil(10 / 4) waves
    assert long.per_run is None and long.run_s == 30 and d.total_requests is None
    lines = render_dry_run(d, ["greedy", "hot"], 1)
    assert any("assume" in ln and f"{ASSUMED_ITL_MS:g} ms ITL" in ln for ln in lines)
    assert any(ln.startswith("total: unknown") for ln in lines)


def test_one_line_per_cell_with_needs_and_short_levels_flagged():
    d = dry_run(plan([{"name": "steady", "rate": 4, "num_requests": 40, "target": True}]))
    lines = render_dry_run(d, ["greedy", "hot"], 1)
    cells = [ln for ln in lines if ln.startswith("  steady / ")]
    # level scope (the default): a P99 pools the level's two cells, so each needs half of the 500
    assert len(cells) == 2 and all("P99 TTFT 250" in ln and "too few for GO" in ln for ln in cells)
    assert any(ln.startswith("warning:") and "cannot reach GO" in ln for ln in lines)


def test_the_demo_says_it_is_sized_to_show_the_tool():
    notes = demo_notes()
    assert "not to reach GO" in notes[0]
    assert any("cannot reach GO" in n for n in notes[1:])
    assert dry_run(load_plan(DEMO_PLAN)).warnings


def test_the_sizing_is_the_fewest_requests_at_which_each_level_passes_with_its_share_of_80_percent():
    from specguard.verdict.power import Effect, Spreads, level_power, level_size

    args = (Effect(0.20), 0.10, (0.05, 0.05), Spreads(), 0.95)
    s = level_size("steady", 4, True, 3, *args, min_tail=5)
    goal = 0.80 ** (1 / 3)  # three levels share the 80 %: each passes with its cube root
    assert math.prod(level_power(s.per_cell, 4, True, *args).values()) >= goal
    assert math.prod(level_power(s.per_cell - 1, 4, True, *args).values()) < goal
    assert s.requests_per_arm == 4 * s.per_cell and s.limited_by == "P99 E2E"  # the widest spread, 0.35
    narrow = level_size("steady", 4, True, 3, Effect(0.20), 0.10, (0.05, 0.05), Spreads(0.1, 0.1, 0.05), 0.95, 5)
    assert narrow.per_cell < s.per_cell / 10  # the size goes as the spread squared: (0.35 / 0.10)^2 = 12
    floor = level_size("steady", 4, True, 3, Effect(0.20), 0.10, (0.05, 0.05), Spreads(0.01, 0.01, 0.01), 0.95, 5)
    assert floor.per_cell == 125 and floor.limited_by == "tail rule"  # 500 pooled requests for P99, over 4 cells


def test_the_dry_run_sizes_each_level_and_warns_when_the_plan_is_smaller():
    p = plan([{"name": "steady", "rate": 4, "num_requests": 40, "target": True}])
    d = dry_run(p)
    (lv,) = d.levels
    assert d.effect.objective_gain == pytest.approx(0.20) and d.spreads_from == "stated defaults"
    assert lv.sized_s == pytest.approx(lv.sized.per_cell / 40 * lv.run_s * 2 * 2)  # 2 cells, 2 arms
    lines = render_dry_run(d, ["greedy", "hot"], 1)
    assert any(line.startswith("sizing: a GO with 80 % power, if the objective is truly 20 % better") for line in lines)
    assert any(f"steady: {lv.sized.requests_per_arm} requests per arm" in line for line in lines)
    assert any(f"fewer than the {lv.sized.per_cell} a GO needs there" in line for line in lines)


def test_a_pilot_gives_the_spreads_of_its_own_requests(tmp_path):
    from specguard.check.pilot import pilot_spreads
    from tests.unit.report.test_report import make_check

    _, out = make_check(tmp_path / "c")
    spreads, requests = pilot_spreads(out, "itl_ms")
    assert requests == 120  # the baseline's two runs of 60
    assert 0 < spreads.e2e < 1 and 0 < spreads.ttft < 1 and 0 < spreads.objective < 1
