"""A check's greedy outputs: read from its runs for the comparison, summarised once, then forgotten unless kept.

What is stored, and why. Outputs may be sensitive (they answer real prompts),
so they are not kept by default. A hash per request would tell "differs" but
not where, and any unkeyed hash of a short output (or of a prefix) can be
inverted by trying the vocabulary. So while a check runs, each temperature-0
run writes its outputs (token ids, or the text where the server sends none) to
``outputs.jsonl`` beside its records; once the verdict is written the
comparison's result (counts and divergence positions per cell and segment, no
content) goes to ``equivalence.json`` in the check directory and every
``outputs.jsonl`` is deleted, unless the plan says ``keep_output: true``
(``--keep-output``), which also keeps the ids in ``requests.jsonl``.
``specguard report`` recomputes from the outputs while they exist, and reads
``equivalence.json`` after.
"""

from __future__ import annotations

from pathlib import Path

from specguard.analysis.equivalence import Output, SegmentEquivalence, equivalence_by_segment
from specguard.check.plan import CheckPlan, plan_cells
from specguard.models_base import StrictModel
from specguard.results.check_dir import ARMS, CheckDir
from specguard.results.run_dir import RunDir
from specguard.results.store import read_json, write_json_atomic

__all__ = [
    "StoredEquivalence",
    "cell_equivalence",
    "forget_outputs",
    "greedy_cells",
    "run_outputs",
]


class StoredEquivalence(StrictModel):
    """equivalence.json: per cell key, per segment, the comparison (counts and positions, no outputs)."""

    schema_version: str = "specguard.equivalence/1"
    cells: dict[str, dict[str, SegmentEquivalence]] = {}


def run_outputs(run_dir: Path, rep: int) -> list[Output]:
    """The successful requests' outputs of one run: outputs.jsonl, else the ids kept in requests.jsonl; [] if neither."""
    run = RunDir(run_dir)
    records = {r.seq: r for r in run.records() if r.ok}
    outputs = run.outputs()
    found: list[Output] = []
    if outputs is not None:
        for o in outputs:
            r = records.get(o.seq)
            if r is not None:
                ids = tuple(o.token_ids) if o.token_ids is not None else None
                found.append(Output(item=o.item, rep=rep, seq=o.seq, segment=r.segment, token_ids=ids, text=o.text))
        return found
    for r in records.values():
        if r.output_token_ids is not None:
            item = r.item if r.item is not None else r.index
            found.append(Output(item, rep, r.seq, r.segment, tuple(r.output_token_ids), None))
    return found


def _rep(run_dir: Path) -> int:
    return int(run_dir.parent.name.removeprefix("rep"))


def _stored(out: Path) -> StoredEquivalence:
    path = CheckDir(out).equivalence_json
    return read_json(path, StoredEquivalence) if path.exists() else StoredEquivalence()


def _compute(plan: CheckPlan, out: Path, key: str) -> dict[str, SegmentEquivalence] | None:
    d = CheckDir(out)
    arms = {arm: [o for run in d.measured_runs(arm, key, plan.repetitions) for o in run_outputs(run, _rep(run))] for arm in ARMS}
    if not arms["baseline"] and not arms["candidate"]:
        return None
    return equivalence_by_segment(arms["baseline"], arms["candidate"])


def cell_equivalence(plan: CheckPlan, out: Path, key: str) -> dict[str, SegmentEquivalence] | None:
    """A temperature-0 cell's comparison per segment: from its outputs while they exist, else as stored; None: neither."""
    computed = _compute(plan, out, key)
    if computed is not None:
        return computed
    return _stored(out).cells.get(key)


def greedy_cells(plan: CheckPlan) -> list[str]:
    """The cell keys whose outputs are compared: every traffic level x prompt source at a temperature-0 setting."""
    return [c.key for c in plan_cells(plan) if c.sampling.temperature == 0]


def forget_outputs(plan: CheckPlan, out: Path) -> None:
    """After the verdict: the comparison into equivalence.json, then every outputs.jsonl deleted unless ``keep_output``."""
    stored = _stored(out)
    for key in greedy_cells(plan):
        computed = _compute(plan, out, key)
        if computed is not None:
            stored.cells[key] = computed
    if stored.cells:
        write_json_atomic(CheckDir(out).equivalence_json, stored)
    if plan.keep_output:
        return
    for side in sorted(out.rglob(RunDir.OUTPUTS)):
        side.unlink()
