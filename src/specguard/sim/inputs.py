"""``sim run --lengths-from`` and ``--acceptance-from``: the lengths and acceptance of files the user already has.

Lengths come from a ``bench`` run (the server-counted tokens of each successful request, ``from_run``), from
an ``assess`` report (Gate 1's traffic profile: only percentiles of each length, so a distribution rebuilt from
them), from ``assess --requests-out`` (each request's own token counts), or from a request log or prompt file
as ``assess`` reads it, tokenized with a local tokenizer. Acceptance comes from a ``bench`` run's spec-decode
counters or from an ``assess`` report's replay of the method. Each reader returns what it took and the notes a
report must carry about it (an approximation, a share of steps without a draft).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import ValidationError

from specguard.errors import InputFileError, OptionError
from specguard.sim.acceptance import AcceptanceRates
from specguard.sim.workload import Lengths
from specguard.validation import read_input_text

if TYPE_CHECKING:
    from specguard.workload.assess import AssessReport
    from specguard.workload.profile import Distribution

LENGTHS_OPTION = "--lengths-from"
ACCEPTANCE_OPTION = "--acceptance-from"
# quantile points a Gate 1 profile's length distribution is rebuilt at (per length; pairs are their product)
PROFILE_GRID = 64
ASSESS_SCHEMA_PREFIX = "specguard.assess/"


@dataclass(frozen=True)
class Taken:
    """Lengths or acceptance read from a file, with what the report must say about them."""

    lengths: Lengths | None = None
    acceptance: AcceptanceRates | None = None
    notes: list[str] = field(default_factory=list)


def _json_object(path: Path) -> dict[str, object] | None:
    """The file as one JSON object (an ``assess --json`` report), or None when it is JSONL or not JSON."""
    try:
        doc = json.loads(read_input_text(path, "file"))
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _assess_report(path: Path, option: str) -> AssessReport | None:
    from specguard.workload.assess import AssessReport

    doc = _json_object(path)
    if doc is None or not str(doc.get("schema_version", "")).startswith(ASSESS_SCHEMA_PREFIX):
        return None
    try:
        return AssessReport.model_validate(doc)
    except ValidationError as exc:
        raise InputFileError(f"{option} {path}: not a readable 'assess --json' report ({exc.error_count()} errors)") from exc


# --- lengths ----------------------------------------------------------------------------------------------------


def _from_bench_run(path: Path) -> Lengths:
    from specguard.sim.from_run import run_workload

    work = run_workload(path)
    pairs = [(int(p), int(o)) for p, o in zip(work.prompts, work.outputs, strict=True)]
    return Lengths(pairs=pairs, source=f"lengths of the {len(pairs)} requests of bench run {path} (server-counted tokens)")


def _quantiles(dist: Distribution, what: str, path: Path) -> list[int]:
    """``PROFILE_GRID`` values of a length whose profile holds only its mean, p50, p90, p99 and max.

    The quantile function is taken linear between the known points; below the median it starts where the
    profile's mean comes out right (the lower half's mean is what the mean leaves over the upper half's).
    """
    known = (dist.mean, dist.p50, dist.p90, dist.p99, dist.max)
    if not dist.count or any(v is None for v in known):
        raise InputFileError(f"{LENGTHS_OPTION} {path}: the profile has no {what} lengths")
    mean, p50, p90, p99, top = (float(v) for v in known if v is not None)
    upper = 0.4 * (p50 + p90) / 2 + 0.09 * (p90 + p99) / 2 + 0.01 * (p99 + top) / 2
    low = min(max(1.0, 2 * (mean - upper) / 0.5 - p50), p50)
    qs = (np.arange(PROFILE_GRID) + 0.5) / PROFILE_GRID
    values = np.interp(qs, [0.0, 0.5, 0.9, 0.99, 1.0], [low, p50, p90, p99, top])
    return [max(1, round(v)) for v in values]


def _from_profile(report: AssessReport, path: Path) -> tuple[Lengths, str]:
    profile = report.overall.profile
    prompts = _quantiles(profile.prompt_tokens, "prompt", path)
    outputs = _quantiles(profile.output_tokens, "output", path)
    lengths = Lengths(
        pairs=[(p, o) for p in prompts for o in outputs],
        source=f"lengths rebuilt from the Gate 1 profile of {path} ({profile.prompt_tokens.count} requests' percentiles)",
    )
    note = (
        f"{LENGTHS_OPTION} {path}: an assess report keeps only the mean, p50, p90, p99 and max of each length, so the "
        "simulated lengths follow a distribution rebuilt from them, prompt and output drawn independently; "
        "'assess --requests-out FILE' keeps each request's own pair, which this option reads too"
    )
    return lengths, note


def _from_requests_out(lines: list[dict[str, object]], path: Path) -> Lengths:
    pairs = []
    for i, row in enumerate(lines, 1):
        p, o = row.get("prompt_tokens"), row.get("output_tokens")
        if isinstance(p, int) and isinstance(o, int) and p > 0 and o > 0:
            pairs.append((p, o))
        elif not isinstance(p, int):
            raise InputFileError(f"{path}:{i}: prompt_tokens: expected a token count")
    if not pairs:
        raise InputFileError(f"{LENGTHS_OPTION} {path}: no request with an output (output_tokens) to take lengths from")
    return Lengths(pairs=pairs, source=f"lengths of the {len(pairs)} requests of {path} (assess --requests-out)")


def _first_line(path: Path) -> dict[str, object] | None:
    for raw in read_input_text(path, "file").splitlines():
        if raw.strip():
            try:
                obj = json.loads(raw)
            except ValueError:
                return None
            return obj if isinstance(obj, dict) else None
    return None


def _from_log(path: Path, tokenizer: Path | None, output_len: int | None) -> tuple[Lengths, list[str]]:
    """A request log or prompt file, as ``assess`` reads it: prompts tokenized; outputs from the responses, else
    each line's max_tokens, else ``output_len``."""
    from specguard.workload.importers import read_log
    from specguard.workload.tokenize import LocalTokenizer

    if tokenizer is None:
        raise OptionError(
            f"{LENGTHS_OPTION} {path}: its prompts are text; give --tokenizer DIR (the served model's tokenizer) to "
            "count their tokens"
        )
    tok = LocalTokenizer(tokenizer)
    prompts: list[int] = []
    logged: list[int | None] = []
    for entry in read_log(path):
        prompts.append(len(tok.prompt_ids(entry)))
        out = tok.output_ids(entry)
        logged.append(len(out) if out is not None else entry.sampling.max_tokens)
    notes: list[str] = []
    if output_len is not None:
        outputs = [output_len] * len(prompts)
        what = f"--output-len {output_len}"
    elif all(o for o in logged):
        outputs = [int(o or 0) for o in logged]
        what = "the logged responses, else each line's max_tokens"
        if any(e is not None for e in logged):
            notes.append(f"{LENGTHS_OPTION} {path}: a line's max_tokens stands for its output length (exact with ignore_eos)")
    else:
        missing = sum(1 for o in logged if not o)
        raise OptionError(
            f"{LENGTHS_OPTION} {path}: {missing} of {len(logged)} lines have no response and no max_tokens, so no "
            "output length; give --output-len L for them all"
        )
    pairs = [(max(1, p), max(1, o)) for p, o in zip(prompts, outputs, strict=True)]
    return Lengths(
        pairs=pairs, source=f"prompt lengths of the {len(pairs)} lines of {path} ({tokenizer}), outputs from {what}"
    ), notes


def lengths_from(path: Path, *, tokenizer: Path | None = None, output_len: int | None = None) -> Taken:
    """The (prompt, output) pairs ``path`` holds; ``output_len`` only for a file without outputs (a prompt file)."""
    if path.is_dir():
        if output_len is not None:
            raise OptionError(f"{LENGTHS_OPTION} and --output-len: a bench run has its own output lengths; give one")
        return Taken(lengths=_from_bench_run(path))
    report = _assess_report(path, LENGTHS_OPTION)
    first = _first_line(path) if report is None else None
    if output_len is not None and (report is not None or (first is not None and "prompt_tokens" in first)):
        raise OptionError(f"{LENGTHS_OPTION} and --output-len: {path} has its own output lengths; give one")
    if report is not None:
        lengths, note = _from_profile(report, path)
        return Taken(lengths=lengths, notes=[note])
    if first is not None and "prompt_tokens" in first:
        rows = [json.loads(ln) for ln in read_input_text(path, "file").splitlines() if ln.strip()]
        return Taken(lengths=_from_requests_out(rows, path))
    lengths, notes = _from_log(path, tokenizer, output_len)
    return Taken(lengths=lengths, notes=notes)


# --- acceptance -------------------------------------------------------------------------------------------------


def acceptance_from(path: Path, method: str | None) -> Taken:
    """Per-position acceptance from a bench run's server counters, or an assess report's replay of ``method``."""
    if method is None:
        raise OptionError(f"{ACCEPTANCE_OPTION} needs --method (the speculative arm it is the acceptance of)")
    if path.is_dir():
        from specguard.sim.from_run import run_workload

        work = run_workload(path)
        if not work.acceptance:
            raise InputFileError(
                f"{ACCEPTANCE_OPTION} {path}: the run has no per-position spec-decode counters "
                "(vllm:spec_decode_num_accepted_tokens_per_pos): a baseline run, or a server that does not export them"
            )
        notes = []
        if work.draft_fraction is not None and work.draft_fraction < 1.0:
            notes.append(
                f"{ACCEPTANCE_OPTION} {path}: the run drafted on {work.draft_fraction:.0%} of its decode steps (the "
                "proposer found nothing in the others); the simulated arm drafts on every step, so it overstates "
                "the tokens a step yields"
            )
        rates = AcceptanceRates(  # from_run has clamped them and made them non-increasing
            per_position=work.acceptance,
            source=f"bench run {path} (server counters, k={len(work.acceptance)})",
        )
        return Taken(acceptance=rates, notes=notes)
    report = _assess_report(path, ACCEPTANCE_OPTION)
    if report is None:
        raise InputFileError(
            f"{ACCEPTANCE_OPTION} {path}: expected a 'specguard bench' run directory or an 'assess --json' report"
        )
    replayed = {"ngram": report.overall.ngram, "suffix": report.overall.suffix}
    if method not in replayed:
        raise OptionError(
            f"{ACCEPTANCE_OPTION} {path}: an assess report replays ngram and suffix only, not --method {method}; "
            "give a bench run of it, or --acceptance"
        )
    result = replayed[method]
    if result is None or not result.drafts or not result.per_position:
        raise InputFileError(f"{ACCEPTANCE_OPTION} {path}: the report has no {method} replay with drafts")
    k = len(result.per_position)
    rates = AcceptanceRates(  # a replay's per-position shares are non-increasing by construction
        per_position=result.per_position,
        source=f"assess replay in {path} ({method}, k={k}, {result.drafts} drafts)",
    )
    notes = []
    if result.draft_fraction is not None and result.draft_fraction < 1.0:
        notes.append(
            f"{ACCEPTANCE_OPTION} {path}: the replay drafted on {result.draft_fraction:.0%} of decode steps; the "
            "simulated arm drafts on every step, so it overstates the tokens a step yields"
        )
    return Taken(acceptance=rates, notes=notes)


ARRIVALS_OPTION = "--arrivals-from"


def arrivals_from(path: Path) -> tuple[list[float], str]:
    """Arrival offsets (s from the first) for ``--arrival trace``: an open-loop ``bench`` run's send times, or a
    request log's timestamps (Gate 1's input). The engine replays the trace's shape at each ``--rate``."""
    if path.is_dir():
        from specguard.sim.from_run import run_workload

        work = run_workload(path)  # its successful requests' send times, from the first
        kind = work.load_kind
        if kind in ("concurrency", "idle"):
            raise OptionError(
                f"{ARRIVALS_OPTION} {path}: a {kind} run sends when a slot frees, so its send times are the server's "
                "pace, not an arrival process; give an open-loop run (bench --rate) or a request log"
            )
        if kind == "burst":
            raise OptionError(
                f"{ARRIVALS_OPTION} {path}: a burst run sends every request at once, so it has no arrival process; "
                "give an open-loop run (bench --rate) or a request log"
            )
        sent = [float(t) for t in work.arrivals_s]
        what = f"send times of the {len(sent)} requests of {path}"
    else:
        from specguard.workload.importers import read_log

        sent = sorted(e.timestamp.timestamp() for e in read_log(path) if e.timestamp is not None)
        what = f"timestamps of the {len(sent)} timestamped lines of {path}"
    if len(sent) < 2:
        raise InputFileError(f"{ARRIVALS_OPTION} {path}: {len(sent)} arrival times; a trace needs at least 2")
    if sent[-1] - sent[0] <= 0:
        raise InputFileError(f"{ARRIVALS_OPTION} {path}: every arrival has the same time; a trace needs a span")
    return [t - sent[0] for t in sent], what
