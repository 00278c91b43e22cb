"""The assessment for a terminal."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specguard.number_format import fmt, fmt_percent
from specguard.workload.assess import AssessReport, ProposerResult


def _pct(x: float | None) -> str:
    return fmt_percent(x, 0, unit="%")


def _num(x: float | None) -> str:
    return fmt(x)


def _prop(r: ProposerResult | None) -> str:
    if r is None:
        return "-"
    return f"acc {_pct(r.acceptance_rate)}, len {_num(r.mean_acceptance_length)}, steps {fewer_steps(r.step_reduction)}"


def fewer_steps(reduction: float | None) -> str:
    """The step reduction as a signed change: "-55%", and "0%" (not "-0%") where nothing was saved."""
    text = _pct(reduction)
    return text if reduction is None or text == _pct(0.0) else f"-{text}"


def short_config(cfg: dict[str, Any] | None) -> str:
    if not cfg:
        return "-"
    if cfg["method"] == "ngram":
        return f"ngram {cfg['prompt_lookup_min']}..{cfg['prompt_lookup_max']} k={cfg['num_speculative_tokens']}"
    if cfg["method"] == "suffix":
        return f"suffix depth {cfg['suffix_decoding_max_tree_depth']} p>={cfg['suffix_decoding_min_token_prob']}"
    return str(cfg["method"])


def print_assessment(a: AssessReport, console: Console) -> None:
    console.print(
        f"[bold]{escape(a.log)}[/bold]: {a.requests} requests ({a.replayed} with responses), "
        f"tokenized by {escape(a.tokenizer)}" + (f", {a.skipped['count']} bad lines skipped" if a.skipped.get("count") else "")
    )
    if a.suffix_cache:
        console.print(f"suffix decoding replayed on {escape(a.suffix_cache)}")
    p = a.overall.profile
    if p.rate:
        console.print(
            f"rate per minute: p50 {p.rate.per_minute_p50:.2f}, p95 {p.rate.per_minute_p95:.2f}, "
            f"peak {p.rate.per_minute_peak:.2f} req/s over {p.rate.minutes} min"
        )
    if p.concurrency.mean is not None:
        console.print(f"concurrency ({escape(p.concurrency.source)}): mean {p.concurrency.mean:.1f}, peak {p.concurrency.peak}")
    console.print("temperature: " + ", ".join(f"{k}: {v}" for k, v in p.temperature_mix.items()))
    console.print(f"prompt tokens p50 {_num(p.prompt_tokens.p50)}, output tokens p50 {_num(p.output_tokens.p50)}")
    table = Table("segment", "requests", "n-gram 2..5 k=4", "suffix", "verdict", "recommended")
    for name, s in [*a.segments.items(), ("(all)", a.overall)]:
        rec = short_config(s.config)
        table.add_row(escape(name), str(s.requests), _prop(s.ngram), _prop(s.suffix), s.verdict, rec)
    console.print(table)
    for name, s in a.segments.items():
        console.print(f"[bold]{escape(name)}[/bold]: {s.verdict}")
        for r in s.reasons:
            console.print(f"  - {escape(r)}")
    for name, s in [*a.segments.items(), ("(all)", a.overall)]:
        if s.config:
            console.print(f"{escape(name)}: --speculative-config '{escape(json.dumps(s.config))}'", highlight=False)
    if a.check_plan:
        console.print(f"next: specguard check {escape(a.check_plan)} --out runs/after-assess")
    for limit in a.limits:
        console.print(f"[dim]limit: {escape(limit)}[/dim]")
