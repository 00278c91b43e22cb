"""The simulated demo's loads span the crossover the engine model predicts: it helps at the low levels, hurts at the top.

Each level is simulated as the demo runs it (its rate, its duration, no warm-up) with the plan's own arms and
lengths, so a change to the engine model that moves the crossover out of the plan's range fails here, before
anyone watches the demo show no crossover.
"""

from __future__ import annotations

from specguard.check.launchers.simulated import sim_request
from specguard.check.plan import load_plan
from specguard.demo import SIMULATED_DEMO_PLAN
from specguard.loadgen.prompts import synthetic_prompts
from specguard.sim.run import run_sim
from specguard.sim.serve import prompt_tokens


def test_speculation_is_predicted_to_help_at_every_level_but_the_last_and_to_hurt_there():
    plan = load_plan(SIMULATED_DEMO_PLAN)
    req, _ = sim_request(plan.arms.candidate.launch)
    (source,) = plan.prompts
    items = synthetic_prompts(source.source.removeprefix("synthetic:"), count=source.count, max_tokens=plan.max_tokens).items
    (prompt_len,) = {prompt_tokens({"prompt": it.prompt}, chat=False) for it in items}
    speedup = {}
    for lv in plan.levels:
        assert lv.rate is not None
        duration = lv.duration_s if lv.duration_s is not None else (lv.num_requests or 0) / lv.rate
        level = req.model_copy(
            update={
                "rates": [lv.rate],
                "duration_s": duration,
                "warmup_s": 0.0,
                "prompt_len": prompt_len,
                "output_len": plan.max_tokens,
            }
        )
        speedup[lv.rate] = run_sim(level).rates[0].speedup[plan.objective.metric]
    *low, top = sorted(speedup)
    assert min(speedup[r] for r in low) > 1 + plan.objective.min_improvement, speedup
    assert speedup[top] < 1, speedup
    assert low[0] == 1  # from QPS 1
