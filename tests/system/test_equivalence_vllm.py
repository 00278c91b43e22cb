"""Greedy-output equivalence between the embedded baseline and n-gram servers at temperature 0, through a check.

N-gram speculation on vLLM CPU is expected to be lossless at temperature 0, but batching can change the
numerics of either server, so this asserts that the comparison is computed and consistent (the baseline's own
variation measured, token ids used, the warning given exactly when the stated rule says so), not a share;
and that its figures are what the token ids show, recomputed from the raw outputs.jsonl before the verdict deletes
them. Seen on vLLM CPU 0.32: every output identical, the baseline's 18 repeats and the n-gram server's 24 requests
alike (0 differing in both segments). About 45 s on 2 cores, the servers already up.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from specguard.check.outputs import greedy_cells
from specguard.check.plan import load_plan
from specguard.check.report import build_verdict, load_check, write_outputs
from specguard.check.runner import run_check
from specguard.embedded.servers import SERVED_NAME
from specguard.results.check_dir import CheckDir, cell_key
from specguard.results.run_dir import RunDir
from specguard.verdict.budget_tests import error_difference_interval

pytestmark = pytest.mark.vllm


def _no_launch(*_: Any) -> Any:
    raise AssertionError("endpoint arms launch nothing")


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class _Out(NamedTuple):
    item: int
    rep: int
    seq: int
    segment: str
    ids: list[int]


def _divergence(a: list[int], b: list[int]) -> int | None:
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _raw_comparison(out: Path, key: str) -> dict[str, dict[str, list[int | None]]]:
    """The comparison recomputed from the raw files by the rule in analysis/equivalence.py, with nothing of specguard's.

    Per segment and arm, the first divergence of each compared request (None: identical). An item's reference is
    the baseline's first successful request of it (lowest repetition, then seq); a divergence is the first index
    where the token ids differ, or the shorter one's length.
    """
    outputs: dict[str, list[_Out]] = {}
    for arm in ("baseline", "candidate"):
        outputs[arm] = []
        for run in sorted((out / "runs" / arm).glob(f"rep*/{key}")):
            rep = int(run.parent.name.removeprefix("rep"))
            ok = {r["seq"]: r for r in _read(run / RunDir.REQUESTS) if r["ok"]}
            for o in _read(run / RunDir.OUTPUTS):
                r = ok.get(o["seq"])
                if r is None:
                    continue
                # the ids are the whole output: as many as the server's usage counted
                assert r["token_source"] == "server_usage" and len(o["token_ids"]) == r["output_tokens"], (o, r)
                outputs[arm].append(_Out(o["item"], rep, o["seq"], r["segment"], o["token_ids"]))
    reference: dict[int, _Out] = {}
    for o in sorted(outputs["baseline"], key=lambda o: (o.rep, o.seq)):
        reference.setdefault(o.item, o)
    found: dict[str, dict[str, list[int | None]]] = {}
    for arm, rows in outputs.items():
        for o in rows:
            ref = reference.get(o.item)
            if ref is not None and o is not ref:
                found.setdefault(o.segment, {}).setdefault(arm, []).append(_divergence(o.ids, ref.ids))
    return found


def test_greedy_outputs_compared_per_segment_with_the_baseline_own_variation(
    vllm_servers: dict[str, Any], tmp_path: Path
) -> None:
    arms = {
        arm: {"endpoint": {"base_url": vllm_servers[key].base_url, "model": SERVED_NAME}}
        for arm, key in (("baseline", "baseline"), ("candidate", "ngram"))
    }
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(
        yaml.safe_dump(
            {
                "arms": arms,
                "traffic": [{"name": "pair", "concurrency": 2, "num_requests": 12, "target": True}],
                "sampling": [{"name": "greedy", "temperature": 0}],
                "prompts": [{"source": "synthetic:mixed", "count": 6}],
                "repetitions": 2,
                "warmup": 1,
                "max_tokens": 24,
                "equivalence": {"guardrail": True, "max_extra_divergence": 0.2},
            }
        )
    )
    out = tmp_path / "check"
    record = run_check(load_plan(plan_path), plan_path, out, launcher=_no_launch, log=lambda _: None)
    # the outputs exist until the verdict is written: the comparison is recomputed from them first
    raw = {c: _raw_comparison(out, c) for c in greedy_cells(record.measured_plan)}
    v = write_outputs(record, out)
    greedy = [c for c in v.cells if c.equivalence is not None]
    assert greedy and len(greedy) == len(v.cells)
    for c in greedy:
        eq = c.equivalence
        assert eq is not None and eq.unit == "tokens" and eq.note is None  # vLLM 0.32 returns token ids
        # every prompt is sent twice per arm over two repetitions: the baseline's own variation is measured
        assert eq.prompts > 0 and eq.baseline.compared > 0 and eq.candidate.compared >= eq.baseline.compared
        (db, nb), (dc, nc) = (eq.baseline.differing, eq.baseline.compared), (eq.candidate.differing, eq.candidate.compared)
        lo, _ = error_difference_interval((db, nb), (dc, nc))
        warned = any("greedy outputs diverge more" in w and c.name in w for w in v.warnings)
        assert warned == (lo > 0), (eq, v.warnings)
        if dc:
            assert eq.candidate.first_divergence_median is not None
        # the figures are what the token ids show
        mine = raw[cell_key(c.traffic, c.sampling, 0)][c.segment]
        for arm, stats in (("baseline", eq.baseline), ("candidate", eq.candidate)):
            pos = [p for p in mine.get(arm, []) if p is not None]
            assert (stats.compared, stats.differing) == (len(mine.get(arm, [])), len(pos)), (arm, c.segment, stats, mine)
            assert stats.first_divergence_median == (statistics.median(pos) if pos else None)
            assert (stats.first_divergence_min, stats.first_divergence_max) == ((min(pos), max(pos)) if pos else (None, None))
    # the outputs are gone after the verdict; the comparison is stored and a rebuilt report reads it
    assert list(out.rglob(RunDir.OUTPUTS)) == [] and CheckDir(out).equivalence_json.exists()
    rebuilt = build_verdict(load_check(out), out)
    assert [c.equivalence for c in rebuilt.cells] == [c.equivalence for c in v.cells]
