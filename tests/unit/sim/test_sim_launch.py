"""A plan's sim: arm as the simulated server it names: vLLM's fields, sim serve's flags, errors naming the arm."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.check.launchers.simulated import sim_launcher, sim_request
from specguard.check.plan import CheckPlan, CheckPlanError, load_plan
from specguard.demo import SIMULATED_DEMO_PLAN
from specguard.sim.serve_process import SimServeProcess


def _plan(candidate_launch: dict[str, object]) -> CheckPlan:
    return CheckPlan.model_validate(
        {
            "arms": {
                "baseline": {"launch": {"model": "sim:llama-3.1-8b", "extra_args": ["--gpu", "h100-80gb"]}},
                "candidate": {"launch": candidate_launch},
            },
            "traffic": [{"name": "low", "rate": 1, "num_requests": 4, "target": True}],
            "sampling": [{"name": "greedy", "temperature": 0}],
            "prompts": [{"source": "synthetic:random", "count": 4}],
        }
    )


def test_the_demo_plans_arms_are_the_setup_it_describes():
    plan = load_plan(SIMULATED_DEMO_PLAN)
    base, _ = sim_request(plan.arms.baseline.launch)
    cand, scale = sim_request(plan.arms.candidate.launch)
    assert (base.target, base.gpu, base.tensor_parallel_size, base.method) == ("llama-3-70b", "h100-80gb", 4, None)
    assert (cand.method, cand.draft, cand.num_speculative_tokens, scale) == ("draft_model", "llama-3.2-1b", 4, 1.0)


def test_the_launcher_starts_sim_serve_with_the_runners_port_and_log(tmp_path: Path):
    launch = {
        "model": "sim:llama-3.1-8b",
        "max_model_len": 4096,
        "extra_args": ["--gpu=h100-80gb", "--acceptance", "0.8,0.5", "--time-scale", "2", "--max-num-seqs", "16"],
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
    }
    notes: list[str] = []
    launcher = sim_launcher(_plan(launch), notes.append)
    assert "SIMULATED" in notes[0]
    spec = launcher.specs["candidate"]
    assert spec.extra_args == [] and spec.name == "llama-3.1-8b" and spec.speculative_config == launch["speculative_config"]
    assert launcher.server is not None
    server = launcher.server("candidate", spec.model_copy(update={"port": 8123}), tmp_path / "cand.log", 30.0)
    assert isinstance(server, SimServeProcess)
    assert (server.log_path, server.spec.port, server.startup_timeout_s, server.time_scale) == (
        tmp_path / "cand.log",
        8123,
        30.0,
        2.0,
    )
    assert (server.req.acceptance, server.req.max_num_seqs, server.req.max_model_len) == ([0.8, 0.5], 16, 4096)


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        ({"model": "sim:llama-3.1-8b"}, "arms.candidate.launch: extra_args: a sim: arm needs --gpu"),
        ({"model": "sim:llama-3.1-8b", "extra_args": ["--gpu", "h100-80gb", "--port", "1"]}, "--port is not a 'sim serve' flag"),
        ({"model": "sim:llama-3.1-8b", "extra_args": ["--gpu"]}, "--gpu needs a value"),
        ({"model": "sim:no-such-model", "extra_args": ["--gpu", "h100-80gb"]}, "unknown model .no-such-model."),
        ({"model": "/models/llama"}, "the simulated launcher runs only sim: models"),
    ],
)
def test_a_bad_sim_arm_is_refused_before_anything_starts(launch: dict[str, object], message: str):
    with pytest.raises(CheckPlanError, match=message.replace("'", ".").replace("+", r"\+")):
        sim_launcher(_plan(launch), lambda _: None)
