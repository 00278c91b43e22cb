"""Write docs/validation.md: the simulator's predictions beside measurements it was not fitted to.

Run: PYTHONPATH=src .venv/bin/python bench/sim_validation.py [--out docs/validation.md] [--runs DIR] [--published-only]

1. The embedded vLLM, here: the runs of ``sim.validation.EMBEDDED_LOADS`` against real embedded servers
   (baseline, n-gram k=4, n-gram k=2, draft model k=3), started one at a time; a profile is calibrated on the
   baseline and n-gram runs at concurrency 1 and 4 and every other run is predicted from it.
2. The published series of ``sim.published``: the vLLM team's October 2024 post and SpecDecode-Bench.

About 7 minutes on 2 cores (four server starts, sixteen runs of 24 requests and four warm-ups, the published series ~90 s).
The run directories stay under --runs for ``specguard sim calibrate`` or a second look.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specguard import __version__
from specguard.embedded.models import ModelSet, ensure_models
from specguard.embedded.runtime import ensure_runtime
from specguard.embedded.servers import SERVED_NAME, embedded_server, embedded_spec
from specguard.loadgen.runner import run_async, run_bench
from specguard.sim.published import PUBLISHED_SERIES, simulate_series
from specguard.sim.validation import (
    EMBEDDED_LOADS,
    WARM_UP,
    ServerKind,
    ValidationDoc,
    bench_config,
    render_validation_md,
    validate_embedded,
)
from specguard.sizing.catalog import resolve_model
from specguard.vllm.server_spec import ServerSpec

ROOT = Path(__file__).resolve().parents[1]


def _spec(models: ModelSet, server: ServerKind) -> ServerSpec:
    if server == "ngram_k2":
        spec = embedded_spec(models, "ngram")
        assert spec.speculative_config is not None
        return spec.model_copy(update={"speculative_config": {**spec.speculative_config, "num_speculative_tokens": 2}})
    return embedded_spec(models, server)  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "validation.md")
    ap.add_argument("--runs", type=Path, default=None, help="a new directory for the bench runs")
    ap.add_argument("--published-only", action="store_true", help="skip the embedded runs")
    args = ap.parse_args()
    embedded = None
    if not args.published_only:
        runs_dir = args.runs or ROOT / "runs" / f"sim-validation-{time.strftime('%Y%m%d-%H%M%S')}"
        if runs_dir.exists():
            ap.error(f"--runs {runs_dir}: already exists; give a new directory (runs are never overwritten)")
        runs_dir.mkdir(parents=True)
        runtime = ensure_runtime()
        models = ensure_models(runtime)
        done = []
        for server in dict.fromkeys(load.server for load in EMBEDDED_LOADS):
            with embedded_server(runtime, _spec(models, server), f"validation-{server}", runs_dir) as s:
                run_async(run_bench(bench_config(WARM_UP, s.base_url, SERVED_NAME, runs_dir / f"warm_up-{server}")))
                for load in (x for x in EMBEDDED_LOADS if x.server == server):
                    out = runs_dir / load.name
                    print(f"{load.name}: {server}, {load.label}", flush=True)
                    run_async(run_bench(bench_config(load, s.base_url, SERVED_NAME, out)))
                    done.append((load, out))
        embedded = validate_embedded(
            done, target=resolve_model(str(models.path("target"))), draft=resolve_model(str(models.path("draft")))
        )
    published = []
    for series in PUBLISHED_SERIES:
        print(f"simulating {series.source}: {series.setting}", flush=True)
        published.append(simulate_series(series))
    doc = ValidationDoc(tool_version=__version__, embedded=embedded, published=published)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_validation_md(doc))
    args.out.with_suffix(".json").write_text(doc.model_dump_json(indent=2) + "\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
