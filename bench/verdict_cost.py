"""Requests per arm until the verdict decides, on planted truths: the rule before issue 25 and after, in one run.

From the statistics alone (``specguard.verdict.simulate``: each statistic drawn from its large-sample
distribution, decided by ``decide``), no servers. The plan is the demo's shape: three traffic levels
(one target) x two samplings x two segments = 12 cells, default guardrails, objective p95 ITL with a
10 % minimum improvement.

- before: guardrails per cell (``guardrails.scope: cell``), one look, the size fixed in advance. For
  each size in the sweep, the share of draws that reach the right answer; the reported size is the
  smallest at which that share reaches 80 % (for identical arms: the largest share of false GO seen).
- after: guardrails per traffic level (the default), sampling until decided: a repetition of
  ``--per-rep`` requests per arm and cell, a look after each (Lan-DeMets Pocock-type spending), only
  the undecided levels repeated, up to ``--budget`` requests per arm. Reported: the share of each
  answer and the median requests per arm at the decision.

Spreads (per-request sd of log latency): ``--spreads planted`` are those of the issue's scripted
servers (TTFT 0.044, read off its P99 TTFT interval x0.97 to x1.06 at 102 requests per arm and cell;
ITL and E2E 0.10), ``--spreads cpu`` the embedded CPU demo's (0.30 / 0.35 / 0.25).

Not a test: a table to read. Usage:
    .venv/bin/python bench/verdict_cost.py [--draws 200] [--spreads planted|cpu] [--per-rep 16] [--budget 2400]
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter

import numpy as np

from specguard.verdict.power import Spreads
from specguard.verdict.simulate import Layout, SimGuardrails, Truth, run_sequential, synthetic_verdicts

SPREADS = {"planted": Spreads(objective=0.10, e2e=0.10, ttft=0.044), "cpu": Spreads()}
TRUTHS = {
    "40 % win": (Truth("win", objective_ratio=0.60, e2e_ratio=0.70), "GO"),
    "identical": (Truth("identical"), "not GO"),
    "5 % errors": (Truth("errors", objective_ratio=0.60, e2e_ratio=0.70, error_candidate=0.05), "NO-GO"),
    "tail +30 %": (Truth("tail", objective_ratio=0.60, e2e_ratio=1.30, ttft_ratio=1.30), "NO-GO"),
}
SWEEP = (8, 16, 32, 64, 128, 256, 512, 1024)  # requests per arm and cell


def _right(verdict: str, want: str) -> bool:
    return verdict != "GO" if want == "not GO" else verdict == want


def before(truth: Truth, want: str, spreads: Spreads, draws: int) -> str:
    layout = Layout(guardrails=SimGuardrails(scope="cell"))
    cells = len(layout.cells)
    worst_false_go, decided_at = 0.0, ""
    for i, per_cell in enumerate(SWEEP):
        counts = Counter(v.verdict for v in synthetic_verdicts(layout, truth, per_cell, draws, seed=100 + i, spreads=spreads))
        worst_false_go = max(worst_false_go, counts["GO"] / draws)
        if want != "not GO" and counts[want] >= 0.8 * draws:
            return f"{per_cell * cells} ({counts[want] / draws:.0%} {want})"
        if want == "not GO" and not decided_at and counts["NO-GO"] >= 0.8 * draws:
            decided_at = f"{per_cell * cells} ({counts['NO-GO'] / draws:.0%} NO-GO)"
    if want == "not GO":
        return f"{decided_at or 'never decides in the sweep'}; false GO at most {worst_false_go:.1%} over the sweep"
    return f"> {SWEEP[-1] * cells} (not 80 % {want} within the sweep)"


def after(truth: Truth, spreads: Spreads, draws: int, per_rep: int, budget: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    outs = [run_sequential(Layout(), truth, per_rep, budget, rng, spreads=spreads) for _ in range(draws)]
    counts = Counter(o.verdict for o in outs)
    decided = [o.requests_per_arm for o in outs if o.verdict != "INCONCLUSIVE"]
    shares = ", ".join(f"{k} {v / draws:.0%}" for k, v in sorted(counts.items()))
    median = f"median {int(np.median(decided))} per arm" if decided else "never decided"
    return f"{shares}; {median}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--spreads", choices=sorted(SPREADS), default="planted")
    ap.add_argument("--per-rep", type=int, default=16, help="requests per arm and cell in one repetition")
    ap.add_argument("--budget", type=int, default=2400, help="sequential.max_requests_per_arm")
    a = ap.parse_args()
    spreads = SPREADS[a.spreads]
    print(f"spreads {a.spreads}: {dataclasses.asdict(spreads)}; {a.draws} draws per row; 12 cells, 3 levels")
    print(f"| truth | right answer | before: fixed size, scope cell | after: level scope, until decided (<= {a.budget}) |")
    print("|---|---|---|---|")
    for i, (name, (truth, want)) in enumerate(TRUTHS.items()):
        b = before(truth, want, spreads, a.draws)
        f = after(truth, spreads, a.draws, a.per_rep, a.budget, seed=200 + i)
        print(f"| {name} | {want} | {b} | {f} |")


if __name__ == "__main__":
    main()
