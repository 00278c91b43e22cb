"""``embedded:`` names in a check plan, resolved by embedded/ before the plan's arms reach the check runner."""

from __future__ import annotations

from pathlib import Path

from specguard.check.launchers.embedded import uses_embedded
from specguard.check.plan import Arm, Arms, CheckPlan
from specguard.embedded.launch import server_spec_for
from specguard.embedded.models import ModelSet, ModelSetSpec
from specguard.embedded.servers import EMBEDDED_SERVER_ENV, SERVED_NAME
from specguard.vllm.server_spec import LaunchSpec


def launched(**launch: object) -> Arm:
    return Arm(launch=LaunchSpec.model_validate(launch))


def test_embedded_target_and_draft_become_paths_into_the_model_set(tmp_path: Path) -> None:
    models = ModelSet(root=tmp_path, spec=ModelSetSpec())
    arm = launched(
        model="embedded:target",
        env={"KMP_BLOCKTIME": "5"},
        speculative_config={"method": "draft_model", "model": "embedded:draft", "num_speculative_tokens": 3},
    )
    spec = server_spec_for(arm.launch, models, 8123)
    assert spec.model == str(tmp_path / "target") and spec.port == 8123
    assert spec.served_model_name == SERVED_NAME
    assert spec.env == {**EMBEDDED_SERVER_ENV, "KMP_BLOCKTIME": "5"}  # the plan's own env wins
    assert spec.speculative_config == {"method": "draft_model", "model": str(tmp_path / "draft"), "num_speculative_tokens": 3}
    assert arm.launch is not None and arm.launch.model == "embedded:target", "the plan keeps its names as written"


def test_other_models_pass_through_unchanged() -> None:
    arm = launched(model="/srv/models/llama", served_model_name="llama", speculative_config={"method": "ngram"})
    spec = server_spec_for(arm.launch, None, None)
    assert (spec.model, spec.served_model_name, spec.env, spec.port) == ("/srv/models/llama", "llama", {}, None)
    assert spec.speculative_config == {"method": "ngram"}


def test_uses_embedded_sees_a_draft_name_too() -> None:
    from specguard.check.plan import load_plan
    from specguard.demo import DEMO_PLAN

    plan = load_plan(DEMO_PLAN)
    assert uses_embedded(plan)

    def both(arm: Arm) -> CheckPlan:
        return plan.model_copy(update={"arms": Arms(baseline=arm, candidate=arm)})

    assert uses_embedded(both(launched(model="/srv/m", speculative_config={"method": "draft_model", "model": "embedded:draft"})))
    assert not uses_embedded(both(launched(model="/srv/m")))


def test_the_embedded_launcher_gives_server_and_client_their_own_cores(tmp_path: Path, monkeypatch) -> None:
    import specguard.check.launchers.embedded as launch_mod
    from specguard.check.plan import load_plan
    from specguard.demo import DEMO_PLAN
    from specguard.embedded.runtime import VllmRuntime

    runtime = VllmRuntime(
        python=tmp_path / "py", vllm_version="0", version_source="t", serve_argv=["vllm", "serve"], console_script_ok=True
    )
    monkeypatch.setattr(launch_mod, "ensure_runtime", lambda log: runtime)
    monkeypatch.setattr(launch_mod, "ensure_models", lambda rt: ModelSet(root=tmp_path, spec=ModelSetSpec()))
    monkeypatch.setattr(launch_mod.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(launch_mod.shutil, "which", lambda name: "/usr/bin/taskset")
    notes: list[str] = []
    launcher = launch_mod.embedded_launcher(load_plan(DEMO_PLAN), notes.append)
    assert launcher.client_cpus == {0}
    assert launcher.serve_argv == ["/usr/bin/taskset", "-c", "1", "vllm", "serve"]
    assert all(s.env["VLLM_CPU_OMP_THREADS_BIND"] == "1" for s in launcher.specs.values())
    assert any("client on CPU 0" in n for n in notes)
