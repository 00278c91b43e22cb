"""A load sweep on the embedded vLLM baseline and n-gram servers as endpoint arms, on the smallest range that shows it.

Where n-gram speculation stops paying on vLLM CPU is not known in advance, so this asserts what the sweep claims
against what its stored runs show: the probe measured one request at a time and saturated and took the baseline's
achieved rates from them, the rates between were measured on both arms, how the sweep ended follows from the
measured statuses, and the crossover is named as an interval exactly when the sweep bracketed one (else its record
says why not). The scripted test_check_sweep.py plants a known crossover and bisects it; this one is about the
real servers, on the smallest sweep that still has a rate between the probes: 3 levels x 2 arms, 6 requests each.

31-34 s on 2 cores, the servers already up. Each run costs about 3.5 s besides its requests (its recorder and
scraper child processes start and stop), so every level adds about 9 s: with 2 rates and one bisection it took
56-59 s. Seen in three runs: one request at a time 1.9-2.5 requests/s, 4 in flight 9.7-11.5; n-gram's p50 ITL
x0.3-0.7 of the baseline's where it paid. Each branch below ran: paid at every rate (no crossover); paid one at a
time only, 'rate-1' x0.39 but its interval x0.23-x1.47 (crossover between 1.88 and 5.79 requests/s); and, with
bisection, worse at saturation (x1.06, crossover between 9.3 and 10.8).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specguard.check.plan import load_plan
from specguard.check.report import write_outputs
from specguard.check.runner import run_check
from specguard.embedded.servers import SERVED_NAME

pytestmark = pytest.mark.vllm

NUM_REQUESTS = 6
MAX_CONCURRENCY = 4
RATES = 1


def _no_launch(*_: Any) -> Any:
    raise AssertionError("endpoint arms launch nothing")


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _achieved_rate(records: list[dict[str, Any]]) -> float:
    """Requests over the measured window: first send to the last response end."""
    start = min(r["sent_s"] for r in records)
    end = max(r["sent_s"] + (r["stream_end_s"] or r["e2e_s"] or 0.0) for r in records)
    return len(records) / (end - start)


def _bracket(levels: list[dict[str, Any]], paid: dict[str, bool]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The first (paid, not paid) pair of neighbouring levels by requests/s."""
    ordered = sorted(levels, key=lambda lv: lv["load_rps"])
    return next(((lo, hi) for lo, hi in zip(ordered, ordered[1:]) if paid[lo["name"]] and not paid[hi["name"]]), None)


def test_sweep_probes_measures_the_rates_between_and_names_the_crossover_or_why_not(
    vllm_servers: dict[str, Any], tmp_path: Path
) -> None:
    arms = {
        arm: {"endpoint": {"base_url": vllm_servers[key].base_url, "model": SERVED_NAME}}
        for arm, key in (("baseline", "baseline"), ("candidate", "ngram"))
    }
    sweep = {
        "num_requests": NUM_REQUESTS,
        "max_concurrency": MAX_CONCURRENCY,
        "rates": RATES,
        "arrival": "constant",
        "bisect_steps": 0,
    }
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(
        yaml.safe_dump(
            {
                "arms": arms,
                "traffic": {"sweep": sweep},
                "sampling": [{"name": "greedy", "temperature": 0}],
                "prompts": [{"source": "synthetic:repetitive", "count": 8}],  # one segment: a level pays or not
                "repetitions": 1,
                # the n-gram server's first request compiles its proposer: TTFT 3.8 s against 0.4 s after it
                "warmup": 1,
                "max_tokens": 12,
                "objective": {"metric": "itl_ms", "percentile": "p50", "min_improvement": 0.1},
                "statistics": {"resamples": 200},
            }
        )
    )
    out = tmp_path / "check"
    record = run_check(load_plan(plan_path), plan_path, out, launcher=_no_launch, log=lambda _: None)
    write_outputs(record, out)
    v = json.loads((out / "verdict.json").read_text())

    rec = json.loads((out / "check.json").read_text())["sweep"]
    stages = {s["name"]: s for s in rec["stages"]}
    assert rec["finished"] and rec["note"] and all(s["reason"] for s in rec["stages"])
    assert list(stages) == ["probe", "rates"]  # bisect_steps 0: no bisection (test_check_sweep.py bisects)
    levels = [lv for s in rec["stages"] for lv in s["levels"]]

    # every level of every stage was measured on both arms, as the level says
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for lv in levels:
        for arm in ("baseline", "candidate"):
            run = out / "runs" / arm / "rep1" / f"{lv['name']}__greedy__p0"
            records = _read(run / "requests.jsonl")
            assert len(records) == NUM_REQUESTS and all(r["ok"] for r in records), (arm, lv)
            load = json.loads((run / "run.json").read_text())["load"]
            if lv["rate"] is None:
                assert (load["kind"], load["concurrency"]) == ("concurrency", lv["concurrency"])
            else:
                assert (load["kind"], load["rate"]) == ("constant", lv["rate"])
            runs[(arm, lv["name"])] = records

    # the probe: one at a time and saturated, their rates the baseline's achieved ones; saturated is faster
    probe = {lv["name"]: lv for lv in stages["probe"]["levels"]}
    assert (probe["sync"]["concurrency"], probe["saturate"]["concurrency"]) == (1, MAX_CONCURRENCY)
    for name in ("sync", "saturate"):
        assert probe[name]["load_rps"] == pytest.approx(_achieved_rate(runs[("baseline", name)]), rel=1e-9)
    sync, sat = probe["sync"]["load_rps"], probe["saturate"]["load_rps"]
    assert sat > sync, (sync, sat)  # four in flight: the server batches them

    # the rates between: evenly spaced strictly inside (sync, saturated)
    rates = [lv["rate"] for lv in stages["rates"]["levels"]]
    assert rates == pytest.approx([sync + (sat - sync) * i / (RATES + 1) for i in range(1, RATES + 1)], rel=1e-12)

    # paid per level, as the verdict shows it; how the sweep ended follows from it
    status = {line["traffic"]: line["status"] for line in v["lines"]}
    assert set(status) == {lv["name"] for lv in levels}
    paid = {name: s == "better" for name, s in status.items()}
    found = _bracket(levels, paid)
    crossing = [c for c in v["crossover"] if c.startswith("greedy / extraction:")]
    if found is None:
        assert rec["note"].startswith("no crossover"), rec["note"]
        assert crossing == [], crossing
    else:
        lo, hi = found
        assert rec["note"].startswith("crossover bracketed after 0 bisection step"), rec["note"]
        assert f"between offered load {lo['load_rps']:g} and {hi['load_rps']:g}" in " ".join(crossing), (crossing, lo, hi)
