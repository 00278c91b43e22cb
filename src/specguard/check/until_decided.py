"""``check --until-decided``: further repetitions while the verdict is INCONCLUSIVE and the budget lasts.

After the plan's repetitions the check decides at look 1 of an alpha-spending plan (``verdict.sequential``:
Lan & DeMets 1983, a Pocock-type spending function, for the GO side's bounds and the NO-GO side's Holm
family alike). While the verdict is INCONCLUSIVE, the plan's ``sequential.look_every`` further
repetitions run, both arms interleaved, over the traffic levels whose tests are still undecided only,
and it decides again at the next look. A level-wide test (its P99 guardrails, its error rate) repeats
every sampling setting of the level; an objective undecided at one target cell repeats that sampling only.
The looks are planned up front from the requests per arm: the
plan's repetitions, then every ``look_every`` repetitions more while the total stays within
``sequential.max_requests_per_arm``; the last look spends what alpha is left. Every look (its number,
the requests per arm so far, each test's interval and p-value) goes into check-state.json as it is
taken, so ``--resume`` continues the sequence, and into check.json, verdict.json and the report.

A look that repeats only some levels has fewer requests than planned, so its share of alpha (set by the
planned fraction) is, if anything, spent early: the error rates stay within their bounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specguard.check.record import block_name
from specguard.check.report import build_verdict
from specguard.check.runner import _Run, requests_to_run
from specguard.errors import UsageError
from specguard.results.check_dir import cell_key
from specguard.verdict.model import Look, LookRecord, Undecided
from specguard.verdict.sequential import look_schedule, planned_looks

if TYPE_CHECKING:
    from specguard.check.plan import CheckPlan

__all__ = ["check_until_decided_plan", "run_until_decided"]


def check_until_decided_plan(plan: CheckPlan) -> None:
    """Refuse, before any traffic, a plan that ``--until-decided`` cannot run."""
    if plan.sequential is None:
        raise UsageError(
            "--until-decided needs the plan's sequential: block, e.g. 'sequential: {max_requests_per_arm: 4000, "
            "look_every: 1}' (the budget of measured requests per arm, and repetitions between looks)"
        )
    if plan.sweep is not None:
        raise UsageError("--until-decided runs a plan's list of traffic levels, not a sweep: give 'traffic:' a list")
    timed = [t.name for t in plan.levels if t.num_requests is None]
    if timed:
        raise UsageError(
            f"--until-decided counts requests per arm: traffic level(s) {', '.join(timed)} need num_requests, "
            "not a duration alone"
        )


def _per_repetition(run: _Run) -> int:
    n = requests_to_run(run.resolved, run.resolved.plan.levels, [1])
    assert n is not None  # check_until_decided_plan refused timed levels before any traffic
    return n  # per arm: one block's requests


def _undecided_cells(plan: CheckPlan, undecided: list[Undecided], sources: int) -> list[str]:
    """The cells a further repetition runs: each undecided level's undecided sampling settings (all, for a
    level-wide test such as its P99 guardrails), every prompt source."""
    out = []
    for t in plan.levels:
        wanted = {u.sampling for u in undecided if u.traffic == t.name}
        for smp in plan.sampling:
            if None in wanted or smp.name in wanted:
                out += [cell_key(t.name, smp.name, i) for i in range(sources)]
    return out


def run_until_decided(run: _Run) -> None:
    """Look, and while undecided run the undecided levels' further repetitions, until decided or out of budget."""
    plan = run.resolved.plan
    assert plan.sequential is not None  # check_until_decided_plan refused the plan at the edge otherwise
    per_rep = _per_repetition(run)
    seq = plan.sequential
    schedule = look_schedule(planned_looks(per_rep * plan.repetitions, per_rep, seq.look_every, seq.max_requests_per_arm))
    state = run.state
    while True:
        k = len(state.looks)
        if k:
            last = state.looks[-1]
            if last.verdict != "INCONCLUSIVE" or last.index >= last.of or not last.undecided:
                return
            # the repetitions after the last look (begun, or cut short and resumed): blocks done are skipped
            reps = state.repetitions_run or plan.repetitions
            levels = {u.traffic for u in last.undecided}
            run.stage(None, [t for t in plan.levels if t.name in levels], reps=range(plan.repetitions + 1, reps + 1))
        if k >= len(schedule):
            return
        look: Look = schedule[k]
        v = build_verdict(run.record, run.d.root, look=look, looks=state.looks)
        record = LookRecord(
            index=look.index,
            of=look.of,
            requests_per_arm=sum(c.requests_baseline or 0 for c in v.cells),
            verdict=v.verdict,
            alpha_go=look.alpha_go,
            alpha_nogo=look.alpha_nogo,
            tests=v.tests,
            undecided=v.undecided,
        )
        state.looks.append(record)
        run.log(
            f"look {look.index} of {look.of}: {v.verdict} at {record.requests_per_arm} requests per arm "
            f"(GO-side bounds at {look.alpha_go:.4f}, NO-GO family at {look.alpha_nogo:.4f})"
        )
        if v.verdict == "INCONCLUSIVE" and not look.final and v.undecided:
            reps = state.repetitions_run or plan.repetitions
            more = list(range(reps + 1, reps + seq.look_every + 1))
            state.repetitions_run = more[-1]
            state.blocks += [block_name(r, a) for r in more for a in run.resolved.arms]
            cells = _undecided_cells(plan, v.undecided, len(run.resolved.prompt_sets))
            state.block_cells |= {block_name(r, a): cells for r in more for a in run.resolved.arms}
        run.save()
