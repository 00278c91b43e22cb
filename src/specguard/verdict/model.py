"""The decision's inputs and outputs: per-cell comparisons in, a verdict with structured reasons out."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field

from specguard.analysis.ab_statistics import RatioResult
from specguard.analysis.equivalence import SegmentEquivalence
from specguard.results.models import WarningNote

Status = Literal["better", "worse", "no detectable difference", "inconclusive"]
VerdictName = Literal["GO", "NO-GO", "INCONCLUSIVE"]
ReasonCode = Literal[
    "go",
    "no_cell_measured",
    "server_oom",
    "server_crash",
    "objective_undersampled",
    "objective_worse",
    "objective_no_difference",
    "objective_below_minimum",
    "guardrail_regressed",
    "guardrail_unverified",
    "guardrail_unresolved",
    "guardrails_unverified_more",
    "error_rate_rose",
    "error_rate_unresolved",
    "cell_one_arm",
    "baseline_mismatch",
    "preemptions_rose",
    "goodput_dropped",
    "goodput_unresolved",
    "output_diverged",
    "output_divergence_unresolved",
    "objective_undecided",
    "sequential_budget_spent",
]
GuardrailScope = Literal["level", "cell"]
TestOutcome = Literal["within", "beyond", "undecided"]


class ObjectiveRule(Protocol):
    """What the decision needs of the check plan's objective (read-only, so the plan's models satisfy it)."""

    @property
    def metric(self) -> str: ...
    @property
    def percentile(self) -> str: ...
    @property
    def min_improvement(self) -> float: ...


class GuardrailRule(Protocol):
    """What the decision needs of the check plan's guardrails."""

    @property
    def max_p99_e2e_regression(self) -> float: ...
    @property
    def max_p99_ttft_regression(self) -> float: ...
    @property
    def max_error_rate_increase(self) -> float: ...
    @property
    def max_preemption_increase(self) -> float: ...
    @property
    def max_goodput_drop(self) -> float | None: ...
    @property
    def scope(self) -> GuardrailScope: ...


class EquivalenceRule(Protocol):
    """What the decision needs of the plan's ``equivalence:``: whether it is a guardrail, and its budget."""

    @property
    def guardrail(self) -> bool: ...
    @property
    def max_extra_divergence(self) -> float: ...


class CellComparison(BaseModel):
    traffic: str
    offered_load: float
    target: bool
    sampling: str
    segment: str
    objective: RatioResult
    p99_e2e: RatioResult
    p99_ttft: RatioResult
    error_rate_baseline: float
    error_rate_candidate: float
    # The error-rate test needs counts, not rates; None in inputs made before they were recorded.
    errors_baseline: int | None = None
    errors_candidate: int | None = None
    requests_baseline: int | None = None
    requests_candidate: int | None = None
    preemptions_baseline: float | None = None
    preemptions_candidate: float | None = None
    acceptance_rate: float | None = None
    kv_usage_baseline: float | None = None
    kv_usage_candidate: float | None = None
    waiting_baseline: float | None = None
    waiting_candidate: float | None = None
    gpu_util_baseline: float | None = Field(default=None, description="mean GPU utilisation (%) over the arm's runs")
    gpu_util_candidate: float | None = None
    tokens_per_s_baseline: float | None = Field(default=None, description="mean output tokens/s over the arm's runs")
    tokens_per_s_candidate: float | None = None
    client_warnings: list[str] = []
    client_notes: list[WarningNote] = []  # the client warnings as data, 'where' the arm
    metrics: dict[str, dict[str, RatioResult]] = {}
    equivalence: SegmentEquivalence | None = Field(
        default=None, description="greedy-output comparison (temperature-0 cells whose outputs were collected)"
    )

    @property
    def name(self) -> str:
        return f"{self.traffic} / {self.sampling} / {self.segment}"


class LevelComparison(BaseModel):
    """One traffic level's latency guardrails over all its cells taken together (``guardrails.scope: level``).

    Each percentile's ratio comes from a stratified bootstrap (``compare_pooled_percentile``): every cell
    keeps its weight, and the tail rule counts the level's pooled requests. P90 and P50 are there for the
    NO-GO side where P99 is not yet resolvable (``decide``).
    """

    traffic: str
    offered_load: float
    target: bool
    cells: list[str]
    e2e: dict[str, RatioResult] = Field(description="P99, P90, P50 E2E by percentile name ('p99', 'p90', 'p50')")
    ttft: dict[str, RatioResult]
    goodput: RatioResult | None = Field(default=None, description="the level's goodput ratio, its cells pooled")


class Look(BaseModel):
    """One look of a sequential check: its share of the alpha-spending plan (``verdict.sequential``)."""

    index: int = Field(ge=1)
    of: int = Field(ge=1)
    alpha_go: float = Field(gt=0, le=0.5, description="one-sided level of every GO-side bound at this look")
    alpha_nogo: float = Field(gt=0, le=0.5, description="family-wise level of the NO-GO side (Holm) at this look")

    @property
    def final(self) -> bool:
        return self.index >= self.of


SINGLE_LOOK = Look(index=1, of=1, alpha_go=0.025, alpha_nogo=0.05)


class OneArmCell(BaseModel):
    """A cell that only one arm measured (the other's runs are missing): no comparison, and no GO."""

    traffic: str
    sampling: str
    segment: str
    measured: str  # the arm that has runs

    @property
    def name(self) -> str:
        return f"{self.traffic} / {self.sampling} / {self.segment}"


class Crossover(BaseModel):
    """Where speculation stops paying in one sampling x segment: between two measured loads (an interval)."""

    sampling: str
    segment: str
    paid_traffic: str
    paid_load: float = Field(description="the last load where the objective's interval was better than no change")
    unpaid_traffic: str
    unpaid_load: float = Field(description="the first load above it where it was not")
    unpaid_status: Status


class Failure(BaseModel):
    """A server of an arm that crashed or ran out of memory during the measurements."""

    arm: str
    kind: Literal["crash", "oom"]
    detail: str


class Reason(BaseModel):
    """One reason for the verdict: a code and numbers for programs and tests, the text for people."""

    code: ReasonCode
    cell: str | None = None
    level: str | None = None  # a traffic level's test over all its cells (cell is None then)
    metric: str | None = None
    numbers: dict[str, float] = {}
    text: str
    secondary: bool = False  # an INCONCLUSIVE reason that a NO-GO outranks ("also: ...")


class CellLine(BaseModel):
    traffic: str
    sampling: str
    segment: str
    status: Status
    text: str


class TestAtLook(BaseModel):
    """One test of a look, as it stood: for check-state.json's and the report's record of a sequential check."""

    name: str  # e.g. "P99 TTFT at level 'steady'"
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None  # the NO-GO side's one-sided p (beyond the budget)
    outcome: TestOutcome


class Undecided(BaseModel):
    """Traffic a further look could still decide: a level's sampling setting, or (``sampling`` None) all of a level's."""

    traffic: str
    sampling: str | None = None


class LookRecord(BaseModel):
    """One look of a sequential check as it was taken: for check-state.json, verdict.json and the report."""

    index: int = Field(ge=1)
    of: int = Field(ge=1)
    requests_per_arm: int = Field(ge=0, description="measured requests per arm, over the whole check, at this look")
    verdict: VerdictName
    alpha_go: float
    alpha_nogo: float
    tests: list[TestAtLook] = []
    undecided: list[Undecided] = []

    @property
    def look(self) -> Look:
        """The look this record was decided at (to decide again at it: ``report --force``)."""
        return Look(index=self.index, of=self.of, alpha_go=self.alpha_go, alpha_nogo=self.alpha_nogo)


class Verdict(BaseModel):
    verdict: VerdictName
    reasons: list[Reason]
    lines: list[CellLine]
    warnings: list[str]
    warning_notes: list[WarningNote] = []  # the warnings of known kinds, as data
    crossover: list[str]
    objective: str
    tests: list[TestAtLook] = []  # every test as it stood at this look (objective per target cell, guardrails)
    undecided: list[Undecided] = []  # what a further look could still decide (empty once GO or NO-GO)

    @property
    def reason_texts(self) -> list[str]:
        return [r.text for r in self.reasons]
