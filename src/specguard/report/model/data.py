"""The report data model: everything a check report shows, finished, so that renderers only render.

Built once by the check side (``build_report_data`` in check/report.py),
the only code that reads run directories for a report; ``render_markdown``,
``render_html`` and ``render_terminal`` are pure functions of it. Nothing
under report/ imports from the check package (tests/unit/report/test_report.py checks).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from specguard.analysis.equivalence import DivergenceStats
from specguard.inventory.arm import ArmInventory
from specguard.inventory.model import InventoryDiff
from specguard.report.model.warnings import WarningGroup
from specguard.results.foreign.run import ImportedBaseline
from specguard.results.models import GpuUsage, WarningNote
from specguard.verdict import CellComparison, CellLine, Crossover, Reason, VerdictName
from specguard.verdict.model import LookRecord, TestAtLook, Undecided
from specguard.verdict.reason_groups import ReasonGroup

VERDICT_SCHEMA = "specguard.verdict/1"

GuardOutcome = Literal["off", "within", "unresolved", "failed", "unverified"]


class EquivalenceRow(BaseModel):
    """One temperature-0 cell x segment: the candidate's outputs against the baseline's reference, beside its own variation."""

    cell: str
    target: bool
    unit: Literal["tokens", "characters"]
    prompts: int  # prompt items with a baseline reference output
    baseline: DivergenceStats  # the baseline's other requests against the reference: its own variation
    candidate: DivergenceStats
    difference: float | None  # candidate share - baseline share; None when an arm compared nothing
    difference_ci: tuple[float, float] | None  # its 95 % Newcombe interval, as the warning and the guardrail test it
    warned: bool  # the warning rule fired (verdict/guards.equivalence_warnings)
    guardrail: GuardOutcome  # off: equivalence.guardrail is false
    note: str | None = None  # why positions are in characters (no token ids came back)


class EquivalenceTable(BaseModel):
    """The greedy-output comparison of every temperature-0 cell, or the one line why there is none (``absent``)."""

    rows: list[EquivalenceRow]
    greedy: bool  # the plan has a temperature-0 sampling setting
    guardrail: bool
    budget: float  # equivalence.max_extra_divergence
    not_compared: list[str] = []  # temperature-0 cells without outputs to compare
    absent: str | None = None


class VerdictFile(BaseModel):
    """verdict.json: the verdict, its evidence per cell, the inventory and how to reproduce it."""

    verdict: VerdictName
    reasons: list[str]
    lines: list[CellLine]
    warnings: list[str]
    crossover: list[str]
    objective: str
    schema_version: str = VERDICT_SCHEMA
    plan: str
    exit_code: int
    inventory: dict[str, ArmInventory]
    inventory_diff: InventoryDiff | None = None
    cells: list[CellComparison]
    commands: list[str]
    definitions: dict[str, str]
    reason_details: list[Reason] = []  # the reasons above, structured: code, cell, metric, numbers
    reason_groups: list[ReasonGroup] = []  # the reasons above by kind (deciding ones apart), counted, with ranges
    warning_notes: list[WarningNote] = []  # the warnings of known kinds as data: kind, value, limit, where
    warning_groups: list[WarningGroup] = []  # the warnings above by kind, with counts and the worst value
    labels: dict[str, str] = {}  # the check's --label / labels: metadata, shown in the reports and cells.csv
    equivalence: EquivalenceTable | None = None  # the greedy-output table; None in verdict.json files written before it
    baseline_imports: list[ImportedBaseline] = []  # cells whose baseline is an existing run (--baseline-run), not measured
    simulated: bool = False  # a server's /version is specguard's simulated engine (sim serve): nothing here is measured on vLLM
    looks: list[LookRecord] = []  # a sequential check's looks (check --until-decided), first to last; empty for one look
    tests: list[TestAtLook] = []  # every test as it stood when this verdict was decided
    undecided: list[Undecided] = []  # traffic a further look could still decide (INCONCLUSIVE only)


class LoadSeries(BaseModel):
    """One arm's line over the traffic levels of one sampling setting x segment."""

    arm: str
    sampling: str
    segment: str
    x: list[str]
    objective: list[float]
    p99_e2e: list[float]
    load: list[float] = Field(default_factory=list, description="offered load of each point, the chart's x")
    traffic: list[str] = Field(default_factory=list, description="each point's traffic level (Charts.rate_levels: its unit)")
    # each point's 95% interval (the arm's own bootstrap interval of that percentile)
    objective_ci: list[tuple[float, float]] = Field(default_factory=list)
    p99_e2e_ci: list[tuple[float, float]] = Field(default_factory=list)


class Ecdf(BaseModel):
    """An empirical CDF, thinned for drawing (every point of the top 1 %, evenly spaced ranks below), and its marks."""

    x: list[float]
    y: list[float]  # the fraction of values <= x
    n: int
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


class ArmDistribution(BaseModel):
    arm: str
    itl_ms: list[float]
    tpot_ms: list[float]
    itl_ecdf: Ecdf | None = None
    tpot_ecdf: Ecdf | None = None


class ForestRow(BaseModel):
    """One cell's ratio candidate / baseline for the objective or a guardrail, its interval and the line it is held to."""

    cell: str
    metric: str  # the reasons' name for it: "p95 itl_ms", "P99 E2E", "P99 TTFT"
    role: Literal["objective", "guardrail"]
    ratio: float
    ci_low: float
    ci_high: float
    limit: float  # the objective's 1 -/+ min improvement, or a guardrail's 1 + budget
    target: bool
    deciding: bool  # a reason of the verdict names this cell and metric
    # what the interval says against no change (1), whoever decided: a clear regression is one wherever it is
    effect: Literal["regression", "improvement", "neither"] = "neither"


class Forest(BaseModel):
    """The evidence first: every cell's ratios with intervals, per metric, against its line."""

    metrics: list[str]  # in the order drawn: the objective, then each guardrail
    limits: dict[str, float]
    limit_labels: dict[str, str]  # "min improvement 10 %", "budget +20 %"
    rows: list[ForestRow]


class AcceptanceBars(BaseModel):
    """The candidate's mean per-position acceptance at one traffic level x sampling setting."""

    name: str
    per_position: list[float]


class GaugeTrace(BaseModel):
    arm: str
    t_s: list[float]
    kv_cache_usage: list[float | None]
    requests_waiting: list[float | None]


class GpuTrace(BaseModel):
    """One GPU of one arm's server over a run: utilisation (%) and memory used (MiB) at each sample."""

    arm: str
    gpu: str
    t_s: list[float]
    utilization_pct: list[float | None]
    memory_used_mib: list[float | None]


class GpuPanel(BaseModel):
    """One arm's GPUs over time, or why there are none (``reason``; None when the GPUs were not sampled).

    ``usage``: the same run's figures per GPU (mean, p95, max), for the reports' GPU tables.
    """

    arm: str
    traces: list[GpuTrace]
    reason: str | None = None
    usage: GpuUsage | None = None


class Charts(BaseModel):
    objective_title: str
    load_series: list[LoadSeries]
    target: str
    distributions: list[ArmDistribution]
    acceptance: list[AcceptanceBars]
    gauges: list[GaugeTrace]
    gpu: list[GpuPanel] = Field(default_factory=list)
    crossovers: list[Crossover] = Field(default_factory=list, description="marked on the latency-versus-load chart")
    rate_levels: list[str] = Field(
        default_factory=list, description="traffic levels whose offered load is requests/s; the others' is requests in flight"
    )
    forest: Forest | None = None


class ReportData(BaseModel):
    verdict: VerdictFile
    charts: Charts
    out: str
