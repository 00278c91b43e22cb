"""What to benchmark next: a ``specguard check`` plan built from the assessed traffic, ready to run.

The logged requests become the plan's prompt file (segments kept, each
request's logged output length as its max_tokens); the traffic levels come
from the log's own rates (idle, the median minute, 1.5 x the peak minute);
sampling is greedy plus the log's most common temperature; the candidate is
the recommended config. One config per plan, as the checklist asks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from specguard.workload.assess import AssessReport
from specguard.workload.profile import bucket_temperature

MAX_PROMPTS = 200
PLAN_FILES = ("plan.yaml", "prompts.jsonl")


def write_check_plan(
    report: AssessReport, items: list[dict[str, Any]], out_dir: Path, target_model: str, max_model_len: int | None
) -> Path | None:
    """plan.yaml and prompts.jsonl in ``out_dir``; None when no segment is a candidate."""
    chosen = report.overall if report.overall.config else next((s for s in report.segments.values() if s.config), None)
    if chosen is None or chosen.config is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "prompts.jsonl").open("w") as fh:
        for item in items[:MAX_PROMPTS]:
            fh.write(json.dumps(item) + "\n")
    rate = report.overall.profile.rate
    steady = max(0.1, round(rate.per_minute_p50, 2)) if rate and rate.per_minute_p50 else 1.0
    burst = max(steady * 2, round(1.5 * rate.per_minute_peak, 2)) if rate and rate.per_minute_peak else steady * 4
    mix = report.overall.profile.temperature_mix
    production = bucket_temperature(max(mix, key=lambda b: mix[b])) if mix else 1.0
    launch: dict[str, Any] = {"model": target_model}
    if max_model_len:
        launch["max_model_len"] = max_model_len
    sampling = [{"name": "greedy", "temperature": 0.0}]
    if production > 0:
        sampling.append({"name": "production", "temperature": production})
    n = min(len(items), MAX_PROMPTS)
    plan = {
        "name": f"assess-{Path(report.log).stem}",
        "arms": {"baseline": {"launch": dict(launch)}, "candidate": {"launch": {**launch, "speculative_config": chosen.config}}},
        "order": "interleaved",
        "repetitions": 3,
        "warmup": 2,
        "traffic": [
            {"name": "idle", "num_requests": min(20, n)},
            {"name": "steady", "rate": steady, "num_requests": n, "target": True},
            {"name": "burst", "rate": burst, "num_requests": n},
        ],
        "sampling": sampling,
        "prompts": [{"source": "prompts.jsonl"}],
        "objective": {"metric": "itl_ms", "percentile": "p95", "min_improvement": 0.10},
    }
    header = (
        f"# Written by specguard assess from {report.log}: baseline vs {chosen.config['method']} "
        f"({chosen.verdict}). Rates from the log: steady = median minute, burst = 1.5 x peak minute.\n"
    )
    if chosen.config["method"] == "suffix":
        header += "# suffix decoding needs arctic-inference installed in the vLLM environment.\n"
    path = out_dir / "plan.yaml"
    path.write_text(header + yaml.safe_dump(plan, sort_keys=False))
    return path
