"""What ``specguard bench`` is asked (``BenchRequest``), and the library call that answers it.

The command line only parses its options into a ``BenchRequest`` and hands it
to :func:`bench`. Defaults come from the models the run itself uses
(``BenchConfig``, ``LoadShape``), so an option, a check plan and the library
agree; bounds stay on those models and are reported under the option's name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from specguard.analysis.slo import parse_slo
from specguard.analysis.summarize import format_error_kinds
from specguard.errors import Interrupted, OptionError, OutputExistsError, RequestsFailedError
from specguard.loadgen import runner
from specguard.loadgen.arrivals import load_shape_from_options
from specguard.loadgen.datasets.options import PromptOptions, parse_field_map, parse_length_spec
from specguard.loadgen.prompts import load_prompts
from specguard.loadgen.runner import BenchConfig, ProgressSink
from specguard.results.models import LoadShape, Summary
from specguard.results.run_dir import RunDir
from specguard.validation import check_base_url, default, finite, options, tokenizer_option
from specguard.vllm.urls import server_root

# Option name of each BenchConfig field, for messages that name what the user typed.
BENCH_OPTIONS = {
    "base_url": "--url",
    "model": "--model",
    "metrics_url": "--metrics-url",
    "gpu_metrics_url": "--gpu-metrics-url",
    "request_timeout_s": "--request-timeout",
    "scrape_interval_s": "--scrape-interval",
    "out_dir": "--out",
    "load.rate": "--rate",
    "load.concurrency": "--concurrency",
    "load.burst": "--burst",
    "load.burstiness": "--burstiness",
    "load.num_requests": "--num-requests",
    "load.duration_s": "--duration",
    "load.warmup_requests": "--warmup",
    "load.seed": "--seed",
    "sampling.temperature": "--temperature",
    "sampling.top_p": "--top-p",
    "sampling.max_tokens": "--max-tokens",
}

# Option name of each PromptOptions key path, for the prompt options' messages.
PROMPT_OPTIONS = {
    "format": "--prompt-format",
    "turns": "--turns",
    "fields": "--prompt-field",
    **{f"fields.{k}": f"--prompt-field {k}=" for k in ("prompt", "messages", "segment", "max_tokens")},
    "synthetic.prefix_tokens": "--prefix-tokens",
    **{f"synthetic.{d}": f"--{d.replace('_', '-')}" for d in ("prompt_tokens", "output_tokens")},
    **{
        f"synthetic.{d}.{k}": f"--{d.replace('_', '-')} {k}"
        for d in ("prompt_tokens", "output_tokens")
        for k in ("mean", "std", "min", "max")
    },
}

# The float options checked for finiteness, in the order their messages take precedence.
_FLOAT_OPTIONS = (
    ("rate", "--rate"),
    ("burstiness", "--burstiness"),
    ("duration", "--duration"),
    ("request_timeout", "--request-timeout"),
    ("scrape_interval", "--scrape-interval"),
    ("temperature", "--temperature"),
    ("top_p", "--top-p"),
)


class BenchRequest(BaseModel):
    """One ``specguard bench`` invocation, options as given (``metrics_url`` None: BASE/metrics, 'none': off)."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    model: str
    prompts: str
    out: Path
    rate: float | None = None
    arrival: Literal["poisson", "constant", "gamma"] | None = None
    burstiness: float | None = None
    concurrency: int | None = None
    burst: int | None = None
    num_requests: int | None = None
    duration: float | None = None
    warmup: int = default(LoadShape, "warmup_requests")
    api: Literal["completions", "chat"] = default(BenchConfig, "api")
    metrics_url: str | None = None
    gpu_metrics_url: str | None = None
    scrape_interval: float = default(BenchConfig, "scrape_interval_s")
    seed: int = default(LoadShape, "seed")
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    ignore_eos: bool | None = None
    api_key: str | None = None
    tokenizer: Path | None = None
    request_timeout: float = default(BenchConfig, "request_timeout_s")
    busy_poll: bool = default(BenchConfig, "busy_poll")
    slo: str | None = None
    prompt_format: str | None = None
    prompt_field: tuple[str, ...] = ()
    turns: str | None = None
    prompt_tokens: str | None = None
    prefix_tokens: int | None = None
    output_tokens: str | None = None
    prompt_count: int = 64
    labels: dict[str, str] = {}
    headers: dict[str, str] = {}
    extra_body: dict[str, Any] = {}
    keep_output: bool = False

    @model_validator(mode="after")
    def _options_agree(self) -> BenchRequest:
        """The checks no single model field can make, in the order the command line reports them."""
        for field, option in _FLOAT_OPTIONS:
            finite(getattr(self, field), option)
        finite(self.burstiness, "--burstiness", positive=True)
        if self.arrival is not None and self.rate is None:
            raise OptionError(f"--arrival {self.arrival} needs --rate (it shapes an open-loop schedule)")
        if self.burstiness is not None and self.arrival != "gamma":
            raise OptionError("--burstiness applies to --arrival gamma only")
        try:
            check_base_url(self.base_url)
        except ValueError as exc:
            raise OptionError(f"--url {self.base_url}: {exc}") from exc
        if self.slo is not None:
            parse_slo(self.slo)  # raises OptionError naming --slo
        if self.gpu_metrics_url not in (None, "none"):
            try:
                check_base_url(self.gpu_metrics_url)
            except ValueError as exc:
                raise OptionError(f"--gpu-metrics-url {self.gpu_metrics_url}: {exc}, or 'none'") from exc
        if not self.prompts.strip():
            raise OptionError("--prompts: expected a JSONL prompt file or synthetic:NAME, got an empty string")
        if self.prompt_count < 1:
            raise OptionError(f"--prompt-count: expected a number >= 1 (got {self.prompt_count})")
        return self


def prompt_options(request: BenchRequest) -> PromptOptions:
    """The prompt options as the model a plan's ``prompts:`` entry also uses; a bad one names its option."""
    values: dict[str, object] = {}
    if request.prompt_format is not None:
        values["format"] = request.prompt_format
    if request.turns is not None:
        values["turns"] = request.turns
    if request.prompt_field:
        try:
            values["fields"] = parse_field_map(list(request.prompt_field))
        except ValueError as exc:
            raise OptionError(f"--prompt-field: {exc}") from exc
    synthetic: dict[str, object] = {}
    for option, key, text in (
        ("--prompt-tokens", "prompt_tokens", request.prompt_tokens),
        ("--output-tokens", "output_tokens", request.output_tokens),
    ):
        if text is not None:
            try:
                synthetic[key] = parse_length_spec(text)
            except ValueError as exc:
                raise OptionError(f"{option} {text}: {exc}") from exc
    if request.prefix_tokens is not None:
        synthetic["prefix_tokens"] = request.prefix_tokens
    if synthetic:
        values["synthetic"] = synthetic
    return options(PromptOptions, values, PROMPT_OPTIONS)


def openai_env_defaults(base_url: str | None, api_key: str | None, key_env_given: bool) -> tuple[str, str | None]:
    """``OPENAI_BASE_URL`` when no ``--url``; ``OPENAI_API_KEY`` when no ``--api-key-env`` (the OpenAI SDK's names)."""
    url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL")
    if url is None:
        raise OptionError("--url: not given and OPENAI_BASE_URL is not set")
    if not key_env_given:
        api_key = os.environ.get("OPENAI_API_KEY") or None
    return url, api_key


def bench(request: BenchRequest, progress: ProgressSink | None = None) -> Summary:
    """Validate everything, then run the benchmark into ``request.out`` and return its summary."""
    cfg = bench_config(request)
    return runner.run_async(runner.run_bench(cfg, progress, request.tokenizer))


def bench_config(request: BenchRequest) -> BenchConfig:
    """The run's configuration; every option and the output directory are checked before the server is asked."""
    load = load_shape_from_options(
        rate=request.rate,
        arrival=request.arrival or "poisson",
        burstiness=request.burstiness or 1.0,
        concurrency=request.concurrency,
        burst=request.burst,
        num_requests=request.num_requests,
        duration_s=request.duration,
        warmup_requests=request.warmup,
        seed=request.seed,
    )
    tokenizer_option(request.tokenizer, load=True)
    _check_new_run_dir(request.out)
    return options(
        BenchConfig,
        {
            "base_url": request.base_url,
            "model": request.model,
            "api": request.api,
            "prompts": load_prompts(
                request.prompts,
                seed=request.seed,
                count=request.prompt_count,
                options=prompt_options(request),
                tokenizer=request.tokenizer,
            ),
            "load": load,
            "sampling": {
                "temperature": request.temperature,
                "top_p": request.top_p,
                "max_tokens": request.max_tokens,
                "ignore_eos": request.ignore_eos,
            },
            "metrics_url": _metrics_url(request),
            "gpu_metrics_url": request.gpu_metrics_url,
            "out_dir": request.out,
            "api_key": request.api_key,
            "request_timeout_s": request.request_timeout,
            "scrape_interval_s": request.scrape_interval,
            "busy_poll": request.busy_poll,
            "slo": parse_slo(request.slo) if request.slo is not None else None,
            "headers": request.headers,
            "extra_body": request.extra_body,
            "labels": request.labels,
            "outputs": "keep" if request.keep_output else "off",
        },
        BENCH_OPTIONS,
    )


def raise_for_outcome(summary: Summary, out: Path) -> None:
    """After the summary is shown: an interrupted run, or one where every request failed, ends as an error."""
    if summary.interrupted:
        during = " during warm-up" if summary.notes and "warm-up" in summary.notes[0] else ""
        raise Interrupted(f"interrupted{during}: {summary.requests} requests recorded in {out}")
    if summary.requests and summary.errors == summary.requests:
        raise RequestsFailedError(f"every request failed ({summary.errors}): {format_error_kinds(summary.error_kinds)}")


def _metrics_url(request: BenchRequest) -> str | None:
    if request.metrics_url == "none":
        return None
    return request.metrics_url or f"{server_root(request.base_url)}/metrics"


def _check_new_run_dir(out: Path) -> None:
    """A run never lands on top of a file or of another run; refused here, before the server is asked anything."""
    if out == Path():  # --out '' (the shell's empty string) reads as '.': the run's files would land in the working directory
        raise OptionError("--out: expected a new run directory, got an empty path or '.' (the working directory)")
    if out.exists() and not out.is_dir():
        raise OptionError(f"--out {out}: is a file; expected a new run directory")
    held = RunDir(out).held()
    if held:
        raise OutputExistsError(f"--out {out}: already holds a run ({', '.join(held)}); choose a new --out directory")
