"""report.md: the verdict and its evidence, for a pull request or a ticket.

``md_table`` and ``definition_lines`` are the Markdown shapes the canary's report.md shares with this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specguard.inventory.model import Inventory, ModelIdentity
from specguard.number_format import fmt, fmt_range, fmt_ratio_ci, fmt_samples
from specguard.report.build import greedy_table
from specguard.report.build.forest import deciding_line
from specguard.report.model.data import Charts, EquivalenceTable, Forest, ReportData, VerdictFile
from specguard.report.render import gpu_table
from specguard.report.render.reasons import LOOK_HEADER, LOOKS_METHOD, grouped_reasons, look_rows
from specguard.simulated import SIMULATED_NOTE, SIMULATED_SERVER_BANNER

__all__ = [
    "definition_lines",
    "equivalence_lines",
    "evidence_table",
    "gpu_lines",
    "md_cell",
    "md_table",
    "pinned_line",
    "render_markdown",
    "simulated_lines",
    "warning_lines",
]


def md_cell(text: object) -> str:
    """A value as one table cell: pipes escaped and newlines folded, so a reason or an error cannot break the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table's lines: the header, the rule, one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]


def definition_lines(definitions: Mapping[str, str]) -> list[str]:
    """The Definitions section's list: one ``- **name**: text`` line per definition."""
    return [f"- **{k}**: {d}" for k, d in definitions.items()]


def pinned_line(p: Inventory) -> str:
    """The pinned inventory in one line: what must not change between baseline and candidate."""

    def short(m: ModelIdentity | None) -> str:
        if m is None:
            return "none"
        return f"`{m.name}`" + (f" @{m.revision}" if m.revision else "") + (f" {m.content_hash[:19]}" if m.content_hash else "")

    kv = p.kv
    return (
        f"vLLM {p.vllm_version}, model {short(p.model)}, draft {short(p.draft)}, GPU {p.gpu}, TP {p.tensor_parallel_size}, "
        f"max len {p.max_model_len}, quantization {p.quantization}, KV {kv.num_gpu_blocks} blocks x {kv.block_size} "
        f"= {kv.kv_tokens} tokens, mean prompt/output tokens {p.mean_prompt_tokens}/{p.mean_output_tokens}"
    )


def evidence_table(f: Forest | None) -> list[str]:
    """The forest plot as a table: one row per cell, one column per metric, the deciding entries in bold."""
    if f is None or not f.rows:
        return []
    cells = list(dict.fromkeys((r.cell, r.target) for r in f.rows))
    by = {(r.cell, r.metric): r for r in f.rows}
    header = ["cell", *[f"{m} ({f.limit_labels[m]})" for m in f.metrics]]
    rows = []
    for cell, target in cells:
        row: list[object] = [cell + (" (target)" if target else "")]
        for m in f.metrics:
            r = by.get((cell, m))
            text = "-" if r is None else fmt_ratio_ci(r.ratio, r.ci_low, r.ci_high)
            row.append(f"**{text}**" if r is not None and r.deciding else text)
        rows.append(row)
    return md_table(header, rows)


def warning_lines(v: VerdictFile) -> list[str]:
    """One line per kind of warning, with its count and worst value (every warning when none was grouped)."""
    if v.warning_groups:
        return [g.line for g in v.warning_groups]
    return list(v.warnings)


def equivalence_lines(t: EquivalenceTable | None) -> list[str]:
    """The greedy-output section: what it is held to and one row per temperature-0 cell, or one line why none."""
    if t is None:
        return []
    out = ["## Greedy outputs (temperature 0): candidate against the baseline's own variation", ""]
    if t.absent is not None:
        return out + [f"Not compared: {t.absent}."]
    out += [greedy_table.equivalence_intro(t), ""]
    out += md_table(greedy_table.HEADER, [greedy_table.row_texts(r) for r in t.rows])
    notes = greedy_table.equivalence_notes(t)
    return out + ([""] + [f"- {n}" for n in notes] if notes else [])


def gpu_lines(c: Charts) -> list[str]:
    """The GPU section: the GPU chart's figures per arm and GPU, or why an arm (or every arm) has none."""
    out = [f"## {gpu_table.gpu_title(c.target)}", ""]
    if not c.gpu:
        return out + [f"Not sampled: {gpu_table.NOT_SAMPLED}."]
    rows = gpu_table.gpu_rows(c.gpu)
    out += md_table(gpu_table.HEADER, rows) if rows else []
    notes = gpu_table.gpu_notes(c.gpu)
    return out + ([""] if rows and notes else []) + [f"- {n}" for n in notes]


IMPORTED_NOTE = (
    "The baseline was not measured by this check: each cell's is the run named, one run, so there are no "
    "repetitions of the baseline and its intervals are the request-level bootstrap's alone, never widened for a "
    "spread between repetitions. What the run's format could not carry is listed under the warnings."
)


def baseline_import_lines(v: VerdictFile) -> list[str]:
    """The imported baseline's section: per cell, the run it came from, its format and size."""
    if not v.baseline_imports:
        return []
    rows = [(b.cell, f"`{b.source}`", b.format, b.requests, f"`{b.sha256[:12]}`") for b in v.baseline_imports]
    return [
        "## Baseline: imported, not measured",
        "",
        IMPORTED_NOTE,
        "",
        *md_table(("cell", "run", "format", "requests", "sha256"), rows),
        "",
    ]


def simulated_lines(simulated: bool) -> list[str]:
    """The banner of a report built on specguard's simulated server, as a quoted line and a blank one; [] if not."""
    return [f"> **{SIMULATED_SERVER_BANNER}.** {SIMULATED_NOTE}", ""] if simulated else []


def render_markdown(data: ReportData) -> str:
    v = data.verdict
    out = [f"# specguard check `{v.plan}`{' (SIMULATED)' if v.simulated else ''}: **{v.verdict}**", ""]
    out += simulated_lines(v.simulated)
    deciding = deciding_line(v.reason_details)
    out += [f"**{deciding}**", ""] if deciding else []
    for line, sentences in grouped_reasons(v):
        out += [f"- {line}"] + [f"  - {r}" for r in sentences]
    out += [""]
    if v.looks:
        out += ["## Looks (sequential check)", "", LOOKS_METHOD, "", *md_table(LOOK_HEADER, look_rows(v.looks)), ""]
    out += [f"Objective: {v.objective}.", ""]
    if v.labels:
        out += ["Labels: " + ", ".join(f"`{k}={val}`" for k, val in sorted(v.labels.items())) + ".", ""]
    out += baseline_import_lines(v)
    evidence = evidence_table(data.charts.forest)
    if evidence:
        out += ["## Evidence: ratio candidate / baseline per cell (bold: named by the verdict)", "", *evidence, ""]
    out += [
        "## Per traffic level and segment",
        "",
        "| traffic | sampling | segment | result | numbers |",
        "|---|---|---|---|---|",
    ]
    out += [f"| {x.traffic} | {x.sampling} | {x.segment} | {x.status} | {x.text} |" for x in v.lines]
    if v.crossover:
        out += ["", "## Crossover", ""] + [f"- {c}" for c in v.crossover]
    if v.warnings:
        out += ["", "## Warnings (they do not change the verdict)", ""] + [f"- {w}" for w in warning_lines(v)]
    greedy = equivalence_lines(v.equivalence)
    out += ["", *greedy] if greedy else []
    out += [
        "",
        "## Percentiles (ms), candidate / baseline with 95% interval",
        "",
        "| cell | metric | pct | baseline | candidate | ratio, 95 % CI | samples |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in v.cells:
        for metric, by_q in c.metrics.items():
            for q, r in by_q.items():
                out.append(
                    f"| {c.name} | {metric} | {q} | {fmt(r.baseline)} ({fmt_range(*r.baseline_ci)}) | "
                    f"{fmt(r.candidate)} ({fmt_range(*r.candidate_ci)}) | {fmt_ratio_ci(r.ratio, r.ci_low, r.ci_high)} | "
                    f"{fmt_samples(r.enough_samples, r.more_requests_needed)} |"
                )
    out += ["", *gpu_lines(data.charts)]
    out += ["", "## Inventory", ""]
    for inv in v.inventory.values():
        out.append(
            f"- **{inv.arm}** ({inv.kind}): model `{inv.model}`, vLLM {inv.vllm_version or 'unknown'}, "
            f"speculative config `{inv.speculative_config}`, max model len {inv.max_model_len}"
        )
        if inv.pinned is not None:
            out.append("  - pinned: " + pinned_line(inv.pinned))
    if v.inventory_diff is not None:
        changed = v.inventory_diff.changed_variables
        out.append(f"- baseline vs candidate: {len(changed)} deployment variable(s) changed: {', '.join(changed) or 'none'}")
    out += ["", "## Reproduce", "", "```bash"] + v.commands + ["```", "", "## Definitions", ""]
    out += definition_lines(v.definitions)
    return "\n".join(out) + "\n"
