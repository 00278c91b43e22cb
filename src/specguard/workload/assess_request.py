"""What ``specguard assess`` is asked (``AssessRequest``), and the library call that answers it (:func:`run_assessment`).

Every option and input file is checked, in the order the command line
reports them, before the log is read for the assessment or a file is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from specguard.errors import OptionError
from specguard.validation import (
    finite,
    input_path,
    output_file,
    read_input_text,
    refuse_existing,
    tokenizer_option,
    url_option,
)
from specguard.workload.assess import NO_LIMIT, AssessReport, assess
from specguard.workload.candidacy import LoadFacts
from specguard.workload.importers import LogFormat, SkipCounter, read_log
from specguard.workload.next_check import PLAN_FILES, write_check_plan
from specguard.workload.tokenize import LocalTokenizer, ServerTokenizer

Rules = list[tuple[str, re.Pattern[str]]]


class AssessRequest(BaseModel):
    """One ``specguard assess`` invocation, options as given."""

    model_config = ConfigDict(frozen=True)

    log: Path
    tokenizer: Path | None = None
    url: str | None = None
    model: str | None = None
    log_format: LogFormat = "auto"
    skip_bad: bool = False
    segment_rules: list[str] = []
    sweep: bool = True
    suffix: bool = True
    python: Path | None = None  # a vLLM environment's interpreter whose Arctic Inference replays suffix decoding
    max_model_len: int | None = None
    capacity_rps: float | None = None
    bench_run: Path | None = None
    plan_json: Path | None = None
    write_plan: Path | None = None
    requests_out: Path | None = None
    target_model: str | None = None
    api_key: str | None = None
    force: bool = False


def run_assessment(req: AssessRequest, progress: Callable[[int, int], None] | None = None) -> AssessReport:
    """Gate 1 on one log: checks, load facts, tokenizer, the assessment, and the next check plan if asked.

    ``progress`` is told the requests read and replayed as the log streams (the CLI draws it on stderr).
    """
    _check_options(req)
    rules = segment_rules(req.segment_rules)
    load = _load_facts(req)
    tok = _tokenizer(req)
    items: list[dict[str, object]] = []
    report = _assess(req, tok, rules, load, items, progress or (lambda _read, _replayed: None))
    if req.write_plan is not None:
        path = write_check_plan(report, items, req.write_plan, str(req.target_model), req.max_model_len)
        report.check_plan = str(path) if path else None
    return report


def _check_options(req: AssessRequest) -> None:
    if (req.tokenizer is None) == (req.url is None):
        raise OptionError("give exactly one of --tokenizer DIR or --url URL")
    url_option(req.url)
    tokenizer_option(req.tokenizer)
    input_path(req.python, "--python")
    finite(req.capacity_rps, "--capacity-rps", positive=True)
    if req.write_plan is not None and req.target_model is None:
        raise OptionError("--write-plan needs --target (the model the plan launches)")
    if not req.force:
        refuse_existing([req.write_plan / name for name in PLAN_FILES] if req.write_plan else [], "--write-plan")
        refuse_existing([req.requests_out] if req.requests_out else [], "--requests-out")
    if req.requests_out is not None:
        output_file(req.requests_out, "--requests-out")


def segment_rules(specs: list[str]) -> Rules:
    """``NAME=REGEX`` options as compiled rules, first match wins."""
    rules = []
    for rule in specs:
        name, sep, pattern = rule.partition("=")
        if not sep or not name:
            raise OptionError(f"--segment-rule {rule!r}: expected NAME=REGEX")
        try:
            rules.append((name, re.compile(pattern)))
        except re.error as exc:
            raise OptionError(f"--segment-rule {rule!r}: bad regular expression ({exc})") from exc
    return rules


def _load_facts(req: AssessRequest) -> LoadFacts:
    """Capacity from --capacity-rps or a bench run, concurrency and warnings from a plan JSON."""
    from specguard.loadgen.run_summary import load_or_recompute_summary

    load = LoadFacts(capacity_rps=req.capacity_rps)
    if req.bench_run is not None and req.capacity_rps is None:
        load.capacity_rps = load_or_recompute_summary(req.bench_run).request_rate
    if req.plan_json is not None:
        plan_text = read_input_text(req.plan_json, "plan JSON")
        try:
            plan = json.loads(plan_text)
            load.capacity_concurrency = plan["speculative"]["max_concurrency"]
            load.plan_warnings = list(plan.get("warnings", []))
        except (ValueError, KeyError, TypeError) as exc:
            raise OptionError(f"--plan-json {req.plan_json}: not a 'specguard plan --json' result ({exc})") from exc
    return load


def _tokenizer(req: AssessRequest) -> LocalTokenizer | ServerTokenizer:
    if req.tokenizer is not None:
        try:
            return LocalTokenizer(req.tokenizer)
        except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
            raise OptionError(f"--tokenizer {req.tokenizer}: cannot load its tokenizer.json ({exc})") from exc
    for _ in read_log(req.log, req.log_format, SkipCounter() if req.skip_bad else None):
        pass  # every line is checked before the first request goes to the server's /tokenize
    return ServerTokenizer(str(req.url), req.model, req.api_key)


def _assess(
    req: AssessRequest,
    tok: LocalTokenizer | ServerTokenizer,
    rules: Rules,
    load: LoadFacts,
    items: list[dict[str, object]],
    progress: Callable[[int, int], None],
) -> AssessReport:
    try:
        return assess(
            req.log,
            tok,
            str(req.tokenizer or f"{req.url}/tokenize"),
            fmt=req.log_format,
            skip_bad=req.skip_bad,
            rules=rules,
            sweep=req.sweep,
            suffix=req.suffix,
            max_model_len=req.max_model_len or NO_LIMIT,
            load=load,
            collect=items,
            requests_out=req.requests_out,
            progress=progress,
            arctic_python=req.python,
        )
    except Exception:
        if req.requests_out is not None:
            req.requests_out.unlink(missing_ok=True)  # a failed assessment leaves no half-written replay behind
        raise
