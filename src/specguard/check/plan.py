"""The check plan: what `specguard check` runs and how it decides. A YAML file validated by pydantic.

Errors name the file, the key path and what was expected. API keys are never
in the plan: an endpoint arm names the environment variable that holds one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationError, ValidatorFunctionWrapHandler, model_validator
from pydantic_core import InitErrorDetails

from specguard.analysis.defaults import DEFAULT_RESAMPLES, MIN_RESAMPLES, MIN_TAIL_SAMPLES
from specguard.check.sweep import SweepLevel, SweepSpec, TrafficSweep, sweep_levels
from specguard.errors import InputFileError, OptionError
from specguard.loadgen.arrivals import PLAN_KEYS, load_shape_from_options
from specguard.loadgen.datasets.load import source_problem
from specguard.loadgen.datasets.options import PromptOptions
from specguard.loadgen.extras import check_extra_body, is_secret_header, parse_headers
from specguard.models_base import FiniteModel
from specguard.results.check_dir import cell_key
from specguard.results.models import LoadShape, Slo
from specguard.validation import HttpUrl
from specguard.vllm.server_spec import LaunchSpec
from specguard.yaml_files import load_yaml_model


class EndpointSpec(FiniteModel):
    """A server that already runs."""

    base_url: HttpUrl
    model: str
    metrics_url: HttpUrl | None = None
    gpu_metrics_url: HttpUrl | None = Field(
        default=None, description="a DCGM exporter's page for the server's GPUs (default: NVML if base_url is on loopback)"
    )
    api_key_env: str | None = Field(default=None, description="environment variable holding the API key")


class Arm(FiniteModel):
    launch: LaunchSpec | None = None
    endpoint: EndpointSpec | None = None
    headers: dict[str, str] = Field(default_factory=dict, description="sent on every request of this arm")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="merged into every request body (e.g. chat_template_kwargs)"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Arm:
        if (self.launch is None) == (self.endpoint is None):
            raise ValueError("an arm has exactly one of 'launch' or 'endpoint'")
        # The plan is stored in check.json: a credential there would be written to disk.
        secret = [k for k in self.headers if is_secret_header(k)]
        if secret:
            raise ValueError(f"headers: {', '.join(secret)} look like credentials; a plan is stored, use endpoint api_key_env")
        try:
            parse_headers([f"{k}:{v}" for k, v in self.headers.items()], "headers")
            check_extra_body(self.extra_body, "extra_body")
        except OptionError as exc:
            raise ValueError(str(exc)) from exc
        return self


class Arms(FiniteModel):
    baseline: Arm
    candidate: Arm


class TrafficLevel(FiniteModel):
    name: str
    rate: float | None = Field(default=None, gt=0)
    arrival: Literal["poisson", "constant", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0)
    concurrency: int | None = Field(default=None, gt=0)
    burst: int | None = Field(default=None, gt=0)
    num_requests: int | None = Field(default=None, gt=0)
    duration_s: float | None = Field(default=None, gt=0)
    target: bool = Field(default=False, description="the objective must improve at this level for a GO")

    def load_shape(self, warmup: int, seed: int) -> LoadShape:
        return load_shape_from_options(
            rate=self.rate,
            arrival=self.arrival,
            burstiness=self.burstiness,
            concurrency=self.concurrency,
            burst=self.burst,
            num_requests=self.num_requests,
            duration_s=self.duration_s,
            warmup_requests=warmup,
            seed=seed,
            names=PLAN_KEYS,
        )

    @property
    def offered_load(self) -> float:
        """For ordering levels by load: requests per second, or requests in flight."""
        return self.rate or float(self.concurrency or self.burst or 1)

    @model_validator(mode="after")
    def _shape_is_valid(self) -> TrafficLevel:
        self.load_shape(0, 0)  # raises ValueError naming the flags
        return self


class SweptLevel(TrafficLevel):
    """A level a sweep chose (see ``check.sweep``): ordered by requests/s, a probe's as the baseline measured it."""

    load_rps: float | None = None

    @property
    def offered_load(self) -> float:
        return self.load_rps if self.load_rps is not None else super().offered_load


def swept_level(lv: SweepLevel) -> SweptLevel:
    return SweptLevel(
        name=lv.name,
        rate=lv.rate,
        concurrency=lv.concurrency,
        arrival=lv.arrival,
        num_requests=lv.num_requests,
        target=lv.target,
        load_rps=lv.load_rps,
    )


class SamplingSetting(FiniteModel):
    name: str
    temperature: float = Field(ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)


class PromptSource(PromptOptions):
    """A prompt file (relative to the plan) read as ``format`` (with ``fields`` and ``turns``), or a synthetic set."""

    source: str = Field(min_length=1, description="a prompt file (relative to the plan), synthetic:NAME or synthetic:lengths")
    count: int = Field(default=64, gt=0, description="items of a synthetic set")

    @model_validator(mode="after")
    def _source_fits_options(self) -> PromptSource:
        problem = source_problem(self.source, self)
        if problem:
            raise ValueError(problem)
        return self

    def options(self) -> PromptOptions:
        """The reading options alone, as the loader takes them."""
        return PromptOptions.model_validate(self.model_dump(include=set(PromptOptions.model_fields)))


Metric = Literal["itl_ms", "tpot_ms", "e2e_ms", "ttft_ms", "output_tokens_per_s", "goodput"]


class Objective(FiniteModel):
    metric: Metric = "itl_ms"
    percentile: Literal["p50", "p95", "p99"] = Field(default="p95", description="latencies only; rates ignore it")
    min_improvement: float = Field(default=0.10, ge=0, lt=1)


class Guardrails(FiniteModel):
    max_p99_e2e_regression: float = Field(default=0.05, ge=0)
    max_p99_ttft_regression: float = Field(default=0.05, ge=0)
    max_error_rate_increase: float = Field(default=0.01, ge=0)
    max_preemption_increase: float = Field(default=0.0, ge=0)
    max_goodput_drop: float | None = Field(
        default=None, ge=0, lt=1, description="goodput may fall by at most this fraction (needs slo:); None: no guardrail"
    )
    scope: Literal["level", "cell"] = Field(
        default="level",
        description="level: P99 E2E/TTFT, goodput and greedy divergence tested per traffic level over its cells, "
        "the error rate over the whole check; cell: every guardrail in every cell",
    )


class Sequential(FiniteModel):
    """``check --until-decided``: further repetitions while the verdict is INCONCLUSIVE, up to a budget."""

    max_requests_per_arm: int = Field(gt=0, description="the most measured requests per arm the whole check may send")
    look_every: int = Field(default=1, ge=1, description="repetitions (of both arms) between two looks")


class Equivalence(FiniteModel):
    """Greedy-output equivalence at temperature-0 sampling settings: always measured and warned about; a guardrail if asked."""

    guardrail: bool = Field(default=False, description="a rise beyond the budget is NO-GO, one that straddles it INCONCLUSIVE")
    max_extra_divergence: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="the candidate's share of differing outputs may exceed the baseline's own by at most this",
    )


class Statistics(FiniteModel):
    resamples: int = Field(default=DEFAULT_RESAMPLES, ge=MIN_RESAMPLES)
    min_tail_samples: int = Field(default=MIN_TAIL_SAMPLES, ge=1, description="observations beyond a percentile before it counts")


def _traffic_form(v: Any) -> str:
    # a dict when validating, the model itself when serializing (check.json): without the second, every
    # sweep plan dumped warned "Expected list[TrafficLevel]" (PydanticSerializationUnexpectedValue)
    return "sweep" if isinstance(v, dict | TrafficSweep) else "levels"


# The two forms of ``traffic:``, told apart by shape; their tags are taken out of error locations again
# (``CheckPlan._untag``) so that an error names the key as written: traffic.0.rate, traffic.sweep.rates.
Traffic = Annotated[
    Annotated[list[TrafficLevel], Field(min_length=1), Tag("levels")] | Annotated[TrafficSweep, Tag("sweep")],
    Discriminator(_traffic_form),
]
_TAGS = ("levels", "sweep")


class CheckPlan(FiniteModel):
    name: str = "check"
    arms: Arms
    order: Literal["interleaved", "blocked"] = "interleaved"
    traffic: Traffic = Field(
        description="a list of levels, or {sweep: {...}}: rates chosen while the check runs (check/sweep.py)"
    )
    sampling: list[SamplingSetting] = Field(min_length=1)
    prompts: list[PromptSource] = Field(min_length=1)
    repetitions: int = Field(default=3, ge=1)
    warmup: int = Field(default=2, ge=0)
    seed: int = Field(default=0, ge=0)
    max_tokens: int = Field(default=64, gt=0)
    api: Literal["completions", "chat"] = "completions"
    objective: Objective = Objective()
    guardrails: Guardrails = Guardrails()
    statistics: Statistics = Statistics()
    slo: Slo | None = Field(default=None, description="SLOs every run's goodput counts against (ms)")
    equivalence: Equivalence = Equivalence()
    sequential: Sequential | None = Field(default=None, description="the budget and rhythm of check --until-decided")
    keep_output: bool = Field(default=False, description="keep every output's token ids in requests.jsonl (may be sensitive)")
    labels: dict[str, str] = Field(default_factory=dict, description="metadata carried into every run.json and check.json")

    @model_validator(mode="wrap")
    @classmethod
    def _untag(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> CheckPlan:
        try:
            plan: CheckPlan = handler(data)
        except ValidationError as e:
            errors = []
            for err in e.errors():
                loc = err["loc"]
                if len(loc) > 1 and loc[0] == "traffic" and loc[1] in _TAGS:
                    loc = (loc[0], *loc[2:])
                errors.append(InitErrorDetails(type=err["type"], loc=loc, input=err["input"], ctx=err.get("ctx", {})))
            raise ValidationError.from_exception_data(e.title, errors) from None
        return plan

    @property
    def levels(self) -> list[TrafficLevel]:
        """The traffic levels: the list, or a sweep's known before it runs (its probes); ``with_levels`` sets them."""
        if isinstance(self.traffic, TrafficSweep):
            return [swept_level(lv) for lv in sweep_levels(None, self.traffic.sweep)]
        return self.traffic

    @property
    def sweep(self) -> SweepSpec | None:
        return self.traffic.sweep if isinstance(self.traffic, TrafficSweep) else None

    def with_levels(self, levels: list[SweepLevel]) -> CheckPlan:
        """This plan with a sweep's chosen levels as its list: what the verdict and the report read."""
        return self.model_copy(update={"traffic": [swept_level(lv) for lv in levels]})

    @model_validator(mode="after")
    def _names_unique_and_a_target(self) -> CheckPlan:
        for kind, names in (("traffic", [t.name for t in self.levels]), ("sampling", [s.name for s in self.sampling])):
            if len(set(names)) != len(names):
                raise ValueError(f"{kind} names must be unique (got {names})")
        if self.objective.metric == "goodput" and self.slo is None:
            raise ValueError("objective metric goodput needs 'slo:' (for example slo: {ttft_ms: 500, itl_ms: 50})")
        if self.guardrails.max_goodput_drop is not None and self.slo is None:
            raise ValueError("guardrails.max_goodput_drop needs 'slo:' (goodput counts the requests that meet it)")
        if not any(t.target for t in self.levels):
            raise ValueError("mark at least one traffic level 'target: true' (where the objective must improve)")
        return self


class CheckPlanError(InputFileError):
    """A plan that cannot be used; the message names the file, the key and what was expected."""


def load_plan(path: Path) -> CheckPlan:
    plan = load_yaml_model(path, CheckPlan, CheckPlanError, "check plan")
    # Prompt files, and a synthetic set's tokenizer, are relative to the plan.
    for p in plan.prompts:
        if not p.source.startswith("synthetic:") and not Path(p.source).is_absolute():
            p.source = str((path.parent / p.source).resolve())
        if p.synthetic is not None and p.synthetic.tokenizer and not Path(p.synthetic.tokenizer).is_absolute():
            p.synthetic.tokenizer = str((path.parent / p.synthetic.tokenizer).resolve())
    return plan


@dataclass(frozen=True)
class PlanCell:
    """One cell of a plan: a traffic level x sampling setting x prompt source, and its key."""

    key: str
    traffic: TrafficLevel
    sampling: SamplingSetting
    source: int


def plan_cells(plan: CheckPlan) -> list[PlanCell]:
    return [
        PlanCell(cell_key(t.name, s.name, i), t, s, i)
        for t in plan.levels
        for s in plan.sampling
        for i in range(len(plan.prompts))
    ]
