"""The preflight report for a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from specguard.preflight.run import PreflightReport

_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def _yes(value: bool) -> str:
    return "[green]yes[/green]" if value else "no"


def print_preflight(report: PreflightReport, console: Console) -> None:
    console.print(f"[bold]vLLM {report.version}[/bold] ({report.version_source}; found by {report.found_by})")
    for note in report.workarounds:
        console.print(f"  [yellow]worked around:[/yellow] {note}", highlight=False)
    s = report.surface
    console.print(f"speculation surface ({s.source}):")
    console.print(
        f"  --speculative-config JSON {_yes(s.speculative_config)}   dotted keys {_yes(s.dotted_keys)}   "
        f"-sc {_yes(s.short_alias)}   --spec-method/--spec-model/--spec-tokens {_yes(s.spec_args)}   "
        f"legacy --speculative-model flags {_yes(s.legacy_flags)}"
    )
    console.print(
        "  methods: "
        + ", ".join(m for m in report.methods if not m.endswith("_mtp") or m == "deepseek_mtp")
        + (
            f" (+{sum(m.endswith('_mtp') for m in report.methods) - 1} more *_mtp aliases)"
            if sum(m.endswith("_mtp") for m in report.methods) > 1
            else ""
        ),
        highlight=False,
    )
    if report.command is not None:
        console.print("command: forms used: " + (", ".join(report.command_forms) or "no speculation"), highlight=False)
    if report.config is not None:
        console.print(
            "config: " + escape(str(report.translations.speculative_config if report.translations else report.config)),
            highlight=False,
        )
    for f in report.findings:
        console.print(f"[{_STYLE[f.severity]}]{f.severity:<7}[/] {escape(f.key)}: {escape(f.message)} [dim]({f.source})[/dim]")
        detail = "; ".join(x for x in (f"rule: {f.rule}" if f.rule else "", f"fix: {f.fix}" if f.fix else "") if x)
        if detail:
            console.print(f"        {escape(detail)}", style="dim")
    if report.valid is not None:
        verdict = "[green]ACCEPTED[/green]" if report.valid else "[red]REJECTED[/red]"
        console.print(f"verdict: {verdict} by {' + '.join(report.checked_by)}")
    t = report.translations
    if t is not None:
        console.print(escape(f"  --speculative-config '{t.speculative_config}'"), highlight=False, soft_wrap=True)
        if t.spec_args:
            console.print(
                escape("  " + " ".join(a if not a.startswith("{") else f"'{a}'" for a in t.spec_args)),
                highlight=False,
                soft_wrap=True,
            )
        if t.legacy_flags:
            console.print("  legacy (<= 0.8.2): " + escape(" ".join(t.legacy_flags)), highlight=False, soft_wrap=True)
    if report.server is not None:
        srv = report.server
        console.print(
            f"server {srv.url}: "
            + ("reachable" if srv.reachable else "[red]unreachable[/red]")
            + (f", vLLM {srv.version}" if srv.version else "")
        )
        for m in srv.models:
            console.print(
                f"  model {m.get('id')} (root {m.get('root')}, max_model_len {m.get('max_model_len')})", highlight=False
            )
        if srv.metrics_ok:
            on = "[green]on[/green]" if srv.speculation_on else "off (no spec-decode counters)"
            console.print(f"  speculation {on}; counters: {', '.join(srv.spec_decode_counters) or 'none'}", highlight=False)
            if srv.cache_config:
                keys = ("num_gpu_blocks", "block_size", "cache_dtype", "gpu_memory_utilization", "kv_cache_memory_bytes")
                console.print(
                    "  cache_config_info: " + ", ".join(f"{k}={srv.cache_config[k]}" for k in keys if k in srv.cache_config),
                    highlight=False,
                )
        for e in srv.errors:
            console.print(f"  [red]{e}[/red]", highlight=False)
