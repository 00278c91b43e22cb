"""The main job on the embedded default: the same workload against a baseline and an n-gram server.

Until the decision step (``specguard check``) exists this prints both
summaries side by side; it does not yet give a verdict.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

from specguard.embedded.models import ensure_models
from specguard.embedded.runtime import ensure_runtime
from specguard.embedded.servers import SERVED_NAME, EmbeddedKind, embedded_server, embedded_spec
from specguard.loadgen.prompts import load_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.report.terminal import print_summaries
from specguard.results.models import LoadShape, SamplingOverrides, Summary
from specguard.vllm.process import ManagedServer


def run_demo(out_dir: Path, num_requests: int = 24, rate: float = 2.0, prompts: str = "synthetic:repetitive",
             console: Console | None = None) -> dict[str, Summary]:
    console = console or Console(stderr=True)
    runtime = ensure_runtime(log=lambda m: console.print(f"[dim]{m}[/dim]"))
    for w in runtime.workarounds:
        console.print(f"[dim]runtime workaround: {w}[/dim]")
    models = ensure_models(runtime)
    kinds: list[EmbeddedKind] = ["baseline", "ngram"]
    servers = {k: embedded_server(runtime, embedded_spec(models, k), f"demo-{k}", out_dir / "logs") for k in kinds}
    console.print(f"starting {len(servers)} vLLM CPU servers (about a minute each on 2 cores)...")
    try:
        for s in servers.values():
            s.start()
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(ManagedServer.wait_ready, servers.values()))
        prompt_set = load_prompts(prompts, max_tokens=64)
        summaries: dict[str, Summary] = {}
        for kind, server in servers.items():
            console.print(f"benchmarking {kind} at {server.base_url}")
            cfg = BenchConfig(
                base_url=server.base_url,
                model=SERVED_NAME,
                prompts=prompt_set,
                load=LoadShape(kind="poisson", rate=rate, num_requests=num_requests, warmup_requests=2, seed=0),
                sampling=SamplingOverrides(temperature=0.0),
                metrics_url=server.metrics_url,
                out_dir=out_dir / kind,
            )
            summaries[kind] = run_async(run_bench(cfg))
            # Two CPU servers share two cores: the next run gets the machine to itself.
            server.stop()
    finally:
        for s in servers.values():
            s.stop()
    print_summaries(Console(), summaries, title="baseline vs n-gram speculation (embedded vLLM CPU, temperature 0)")
    return summaries
