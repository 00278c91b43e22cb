"""The plan for a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specguard.sizing.catalog import GIB
from specguard.sizing.run import PlanReport


def print_plan(p: PlanReport, console: Console) -> None:
    t = p.target
    console.print(
        f"[bold]target[/bold] {escape(t.name)}: {t.params / 1e9:.2f}B params, {t.weight_dtype} weights "
        f"{t.weight_bytes / GIB:.2f} GiB, {t.num_layers} layers, {t.attention}, "
        f"KV {t.kv_bytes_per_token / 1024:.1f} KiB/token (whole model)"
    )
    if p.draft:
        d = p.draft
        console.print(
            f"[bold]draft[/bold] {escape(d.name)}: {d.params / 1e9:.2f}B params, {d.weight_bytes / GIB:.2f} GiB, "
            f"{d.num_layers} layers, KV {d.kv_bytes_per_token / 1024:.1f} KiB/token"
        )
    gpu = f"{p.gpu.name} ({p.gpu.memory_bytes / GIB:.1f} GiB)" if p.gpu else "fixed KV budget"
    console.print(
        f"GPU {gpu} x TP {p.tensor_parallel_size}, vLLM {p.vllm_version}, method "
        f"{p.method or 'none'}" + (f", k={p.num_speculative_tokens}" if p.num_speculative_tokens else "")
    )
    table = Table("per GPU", "baseline", "speculative")
    b, s = p.baseline, p.speculative
    rows = [
        ("weights GiB", f"{b.weights_bytes_per_gpu / GIB:.2f}", f"{s.weights_bytes_per_gpu / GIB:.2f}"),
        ("KV budget GiB", f"{b.kv_budget_bytes_per_gpu / GIB:.2f}", f"{s.kv_budget_bytes_per_gpu / GIB:.2f}"),
        ("KV bytes/token", str(b.kv_bytes_per_token_per_gpu), str(s.kv_bytes_per_token_per_gpu)),
        ("KV blocks", str(b.kv_blocks), str(s.kv_blocks)),
        ("KV tokens", str(b.kv_tokens), str(s.kv_tokens)),
        ("lookahead slots/seq", str(b.lookahead_slots), str(s.lookahead_slots)),
        ("max concurrency (workload)", str(b.max_concurrency), str(s.max_concurrency)),
        (
            "concurrency at max_model_len",
            f"{b.max_concurrency_at_max_model_len:.2f}x",
            f"{s.max_concurrency_at_max_model_len:.2f}x",
        ),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        f"KV headroom lost to speculation: {p.headroom_lost_percent:.2f}%"
        + (f"; concurrency lost: {p.concurrency_lost_percent:.2f}%" if p.concurrency_lost_percent is not None else "")
    )
    if p.server_comparison:
        c = p.server_comparison
        console.print(
            f"server ({c.side}): {c.server_blocks} blocks reported, {c.predicted_blocks} predicted "
            f"(error {c.error_percent:+.3f}%; budget {escape(c.kv_budget)})"
        )
    for w in p.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    for n in p.notes:
        console.print(f"[dim]note: {escape(n)}[/dim]")
    r = p.recommendation
    console.print(f"[bold]recommendation:[/bold] {r.method or 'leave speculation off'}")
    for reason in r.reasons:
        console.print(f"  - {escape(reason)}")
    if p.config_json:
        console.print(escape(f"  --speculative-config '{p.config_json}'"), highlight=False)
        if p.spec_args:
            console.print(escape("  " + " ".join(a if not a.startswith("{") else f"'{a}'" for a in p.spec_args)), highlight=False)
    for f in p.config_findings:
        console.print(f"  [yellow]{f.severity}[/yellow] {escape(f.key)}: {escape(f.message)}")
