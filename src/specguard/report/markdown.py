"""report.md: the verdict and its evidence, for a pull request or a ticket."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specguard.check.report import VerdictFile


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def render_markdown(v: VerdictFile) -> str:
    out = [f"# specguard check `{v.plan}`: **{v.verdict}**", ""]
    out += [f"- {r}" for r in v.reasons] + [""]
    out += [f"Objective: {v.objective}.", ""]
    out += ["## Per traffic level and segment", "",
            "| traffic | sampling | segment | result | numbers |", "|---|---|---|---|---|"]
    out += [f"| {x.traffic} | {x.sampling} | {x.segment} | {x.status} | {x.text} |" for x in v.lines]
    if v.crossover:
        out += ["", "## Crossover", ""] + [f"- {c}" for c in v.crossover]
    if v.warnings:
        out += ["", "## Warnings (they do not change the verdict)", ""] + [f"- {w}" for w in v.warnings]
    out += ["", "## Percentiles (ms), candidate / baseline with 95% interval", "",
            "| cell | metric | pct | baseline | candidate | ratio | 95% CI | samples |", "|---|---|---|---|---|---|---|---|"]
    for c in v.cells:
        for metric, by_q in c.metrics.items():
            for q, r in by_q.items():
                enough = "ok" if r.enough_samples else f"too few (+{r.more_requests_needed})"
                out.append(f"| {c.name} | {metric} | {q} | {_f(r.baseline)} ({_f(r.baseline_ci[0])}-{_f(r.baseline_ci[1])}) | "
                           f"{_f(r.candidate)} ({_f(r.candidate_ci[0])}-{_f(r.candidate_ci[1])}) | {_f(r.ratio, 3)} | "
                           f"{_f(r.ci_low, 3)}-{_f(r.ci_high, 3)} | {enough} |")
    out += ["", "## Inventory", ""]
    for inv in v.inventory.values():
        out.append(f"- **{inv.arm}** ({inv.kind}): model `{inv.model}`, vLLM {inv.vllm_version or 'unknown'}, "
                   f"speculative config `{inv.speculative_config}`, max model len {inv.max_model_len}")
    out += ["", "## Reproduce", "", "```bash"] + v.commands + ["```", "", "## Definitions", ""]
    out += [f"- **{k}**: {d}" for k, d in v.definitions.items()]
    return "\n".join(out) + "\n"
