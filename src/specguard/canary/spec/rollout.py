"""The rollout file: what `specguard canary run ROLLOUT.yaml` ships and how it decides. A YAML file validated by pydantic.

It names the pools (baseline, candidate, an optional control), how traffic is split between them, the steps of
the weight, the analysis that judges each window, the hooks run on rollback and on promotion, the admin API and
the state file. Errors name the file, the line and the key path, as a check plan's do (the same ``yaml_files.load_yaml_model``).

``engine`` says what moves the traffic (``spec/engine.py``): specguard's proxy (the default), HAProxy or a
Kubernetes Gateway. With an engine other than the proxy, no proxy runs, so the proxy's own keys, ``listen``,
``split`` and ``workers``, are refused when written rather than silently ignored: a file that sets them expects a proxy
listening and splitting by its sticky key, and would get neither.

Latency metrics mean exactly what ``bench``'s do (``analysis/definitions.py``); the pool gauges use the
canonical names of ``server_metrics/names.py``. Hooks are argument lists, never shell strings: a rollback hook
runs while something is already wrong, which is the worst moment for quoting surprises.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, field_validator, model_validator
from pydantic_core import InitErrorDetails

from specguard.analysis.defaults import DEFAULT_RESAMPLES, MIN_RESAMPLES, MIN_TAIL_SAMPLES
from specguard.canary.spec.engine import (
    GATEWAY_WEIGHT_TOTAL,
    Engine,
    GatewayApiEngine,
    HAProxyEngine,
    ProxyEngine,
    validate_engine,
)
from specguard.canary.spec.grafana import GrafanaConfig
from specguard.canary.spec.metrics import Metrics, ScrapeMetrics
from specguard.canary.spec.validators import EnvName, HeaderName
from specguard.errors import InputFileError
from specguard.models_base import FiniteModel
from specguard.validation import HttpUrl
from specguard.vllm.server_spec import LaunchSpec
from specguard.yaml_files import load_yaml_model

__all__ = [
    "DEFAULT_STEPS",
    "MAX_PROXY_WORKERS",
    "PROXY_ONLY_KEYS",
    "Admin",
    "Analysis",
    "Burst",
    "Critical",
    "Hooks",
    "MetricBudget",
    "Pool",
    "PoolServer",
    "Pools",
    "Rollout",
    "RolloutError",
    "SegmentKey",
    "SegmentRule",
    "Split",
    "State",
    "Step",
    "StickyKey",
    "is_loopback",
    "load_rollout",
    "split_listen",
]

DEFAULT_STEPS: tuple[float, ...] = (1.0, 5.0, 10.0, 25.0, 50.0, 100.0)
PROXY_ONLY_KEYS: tuple[str, ...] = ("listen", "split", "workers")
# The most proxy processes one rollout may ask for: a fixed bound, not this host's os.cpu_count(), so that a file
# validates the same on the host that writes the units and on the host that runs them (``canary run`` warns when
# it asks for more processes than the host has CPUs).
MAX_PROXY_WORKERS = 64


def split_listen(value: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as its host and port; ValueError saying what was expected."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port, e.g. 127.0.0.1:8080 (got {value!r})")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets, e.g. [::1]:8080 (got {value!r})")
    if not 0 < int(port) < 65536:
        raise ValueError(f"port must be 1-65535 (got {port})")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only ever reaches this machine. A host name other than ``localhost`` is not trusted to."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class PoolServer(FiniteModel):
    """One vLLM server of a pool; ``metrics_url`` defaults to the base URL's ``/metrics`` when the proxy reads it."""

    base_url: HttpUrl
    metrics_url: HttpUrl | None = None


class Pool(FiniteModel):
    """A pool: the servers the proxy sends to, and optionally the ``launch`` spec they run (as a check plan's arm).

    With ``launch`` and no servers, specguard starts the server itself (the embedded default); with both, the
    servers are the deployed units that ``specguard canary units`` writes from the spec.
    """

    servers: list[PoolServer] = Field(default_factory=list)
    launch: LaunchSpec | None = None

    @field_validator("servers", mode="before")
    @classmethod
    def _url_shorthand(cls, value: Any) -> Any:
        # A bare URL is the common case; it means a server without a separate metrics URL.
        if isinstance(value, list):
            return [{"base_url": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="after")
    def _somewhere_to_send(self) -> Pool:
        if not self.servers and self.launch is None:
            raise ValueError("a pool needs 'servers' (base URLs), a 'launch' spec, or both")
        urls = [s.base_url.rstrip("/") for s in self.servers]
        if len(set(urls)) != len(urls):
            raise ValueError(f"a server is listed twice in the pool (got {urls})")
        return self


class Pools(FiniteModel):
    baseline: Pool
    candidate: Pool
    control: Pool | None = Field(default=None, description="a baseline replica given the candidate's share")

    @model_validator(mode="after")
    def _disjoint(self) -> Pools:
        # One server in two pools would compare a server with itself and hide every regression.
        seen: dict[str, str] = {}
        for name in ("baseline", "candidate", "control"):
            pool: Pool | None = getattr(self, name)
            for server in pool.servers if pool else []:
                url = server.base_url.rstrip("/")
                if url in seen:
                    raise ValueError(f"{url} is in both the {seen[url]} and the {name} pool")
                seen[url] = name
        return self


class StickyKey(FiniteModel):
    """What keeps a client on one pool: a request header, the OpenAI ``user`` field, or nothing (per request).

    A request that lacks the key is split per request, as with ``none``.
    """

    source: Literal["header", "user", "none"] = "user"
    header: HeaderName | None = Field(default=None, description="the header's name, with source: header")

    @model_validator(mode="after")
    def _header_iff_header(self) -> StickyKey:
        if (self.source == "header") != (self.header is not None):
            raise ValueError("'header' is given exactly when source is 'header'")
        return self


class SegmentRule(FiniteModel):
    """``name`` for requests whose prompt matches ``pattern`` (a regular expression); first match wins, as in assess."""

    name: str = Field(min_length=1)
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"bad regular expression ({exc})") from exc
        return value


class SegmentKey(FiniteModel):
    """What a request's segment is: the model name, a header's value, rules on the prompt, or one segment."""

    source: Literal["model", "header", "rules", "none"] = "model"
    header: HeaderName | None = None
    rules: list[SegmentRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _fields_match_source(self) -> SegmentKey:
        if (self.source == "header") != (self.header is not None):
            raise ValueError("'header' is given exactly when source is 'header'")
        if (self.source == "rules") != bool(self.rules):
            raise ValueError("'rules' (at least one) are given exactly when source is 'rules'")
        names = [r.name for r in self.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rule names must be unique (got {names})")
        return self


class Split(FiniteModel):
    sticky: StickyKey = StickyKey()
    segment: SegmentKey = SegmentKey()
    balance: Literal["round_robin", "least_outstanding"] = Field(
        default="least_outstanding", description="how a server is chosen inside a pool"
    )


class Step(FiniteModel):
    """One weight of the candidate, held at least ``min_time_s`` and ``min_requests`` (to the candidate) before the next."""

    percent: float = Field(gt=0, le=100)
    min_time_s: float = Field(default=180.0, ge=0, description="three default windows")
    min_requests: int = Field(default=100, ge=0, description="requests the candidate served at this step")


LatencyMetric = Literal["itl_ms", "e2e_ms", "ttft_ms", "tpot_ms"]
MetricName = Literal["itl_ms", "e2e_ms", "ttft_ms", "tpot_ms", "error_rate", "requests_waiting", "kv_cache_usage"]
LATENCY_METRICS: tuple[str, ...] = ("itl_ms", "e2e_ms", "ttft_ms", "tpot_ms")
# Pool gauges from /metrics (server_metrics' canonical names), compared candidate minus baseline, per server.
POOL_GAUGES: tuple[str, ...] = ("requests_waiting", "kv_cache_usage")


class MetricBudget(FiniteModel):
    """How much worse than the baseline the candidate may be on one metric before a window fails.

    Latencies compare a percentile as a ratio (``budget: 0.10``: at most 10 % worse); the error rate and the
    pool gauges compare an absolute difference (0.005 = half a point of error rate; requests waiting per
    server; KV-cache usage as a fraction). ``direction`` says which way is worse; it defaults to the metric's
    natural one (all of these are better lower).
    """

    metric: MetricName
    percentile: Literal["p50", "p95", "p99"] | None = None
    direction: Literal["lower_is_better", "higher_is_better"] = "lower_is_better"
    budget: float = Field(ge=0)
    comparison: Literal["ratio", "difference"] | None = None

    @model_validator(mode="after")
    def _fits_the_metric(self) -> MetricBudget:
        latency = self.metric in LATENCY_METRICS
        if latency and self.percentile is None:
            raise ValueError(f"{self.metric} needs a percentile (p50, p95 or p99)")
        if not latency and self.percentile is not None:
            raise ValueError(f"{self.metric} has no percentile")
        natural: Literal["ratio", "difference"] = "ratio" if latency else "difference"
        if self.comparison is None:
            self.comparison = natural
        elif self.comparison != natural:
            raise ValueError(f"{self.metric} is compared as a {natural}")
        return self

    @property
    def key(self) -> str:
        return f"{self.metric}.{self.percentile}" if self.percentile else self.metric


def default_metrics() -> list[MetricBudget]:
    """The issue's defaults: P99 ITL, E2E and TTFT at most 10 % worse, error rate at most 0.5 points higher,
    and the candidate's waiting requests and KV-cache usage within a margin of the baseline's."""
    return [
        MetricBudget(metric="itl_ms", percentile="p99", budget=0.10),
        MetricBudget(metric="e2e_ms", percentile="p99", budget=0.10),
        MetricBudget(metric="ttft_ms", percentile="p99", budget=0.10),
        MetricBudget(metric="error_rate", budget=0.005),
        MetricBudget(metric="requests_waiting", budget=2.0),
        MetricBudget(metric="kv_cache_usage", budget=0.10),
    ]


class Burst(FiniteModel):
    """At least ``count`` events within ``within_s`` seconds on the candidate pool."""

    count: int = Field(ge=1)
    within_s: float = Field(gt=0)


class Critical(FiniteModel):
    """Conditions that roll back at once, without waiting for failing windows."""

    server_failure: bool = Field(default=True, description="an OOM, crash or restart of a candidate server")
    http_5xx_burst: Burst | None = Burst(count=5, within_s=10.0)
    stream_error_burst: Burst | None = Burst(count=5, within_s=10.0)


class Analysis(FiniteModel):
    window_s: float = Field(default=60.0, gt=0)
    metrics: list[MetricBudget] = Field(default_factory=default_metrics, min_length=1)
    critical: Critical = Critical()
    rollback_windows: int = Field(default=2, ge=1, description="consecutive failing windows that roll back")
    promote_windows: int = Field(default=3, ge=1, description="consecutive passing windows that advance a step")
    false_rollback_rate: float = Field(default=0.05, gt=0, lt=1, description="over the whole rollout, not per window")
    min_tail_samples: int = Field(default=MIN_TAIL_SAMPLES, ge=1, description="observations beyond a percentile before it counts")
    resamples: int = Field(default=DEFAULT_RESAMPLES, ge=MIN_RESAMPLES)
    min_samples: int = Field(default=50, ge=2, description="requests per pool, segment and window before a metric is judged")
    min_stratum_samples: int = Field(
        default=5, ge=1, description="requests of each pool an in-flight stratum needs before it joins the matched comparison"
    )
    min_power: float = Field(
        default=0.8,
        ge=0,
        lt=1,
        description="a window passes only when its test had this power to see each metric's budget; 0: no power rule",
    )
    spending: Literal["pocock", "obrien_fleming"] = Field(
        default="pocock", description="how the false-rollback rate is spent over the looks"
    )
    max_looks: int | None = Field(
        default=None,
        ge=1,
        description="the looks (windows) the error rate is spread over; default: twice the windows the steps need",
    )

    @model_validator(mode="after")
    def _metrics_unique(self) -> Analysis:
        keys = [m.key for m in self.metrics]
        if len(set(keys)) != len(keys):
            raise ValueError(f"each metric (and percentile) once (got {keys})")
        return self


def _argv_only(value: Any) -> Any:
    if isinstance(value, str):
        raise ValueError(f"argument lists only, never a shell string: write [{', '.join(value.split())}] (got {value!r})")
    return value


class Hooks(FiniteModel):
    """Commands run on rollback and on final promotion, in order, each an argument list run without a shell.

    ``[systemctl, stop, unit]`` is one command; a list of such lists runs several. Shell metacharacters in an
    argument reach the program literally.
    """

    rollback: list[list[str]] = Field(default_factory=list)
    promote: list[list[str]] = Field(default_factory=list)
    timeout_s: float = Field(default=120.0, gt=0, description="per command")
    retries: int = Field(default=0, ge=0, description="further tries of a failing command")
    env: list[EnvName] = Field(
        default_factory=list,
        description="names of the controller's environment variables a hook also gets (besides PATH, HOME, LANG, "
        "LC_ALL, TZ and the SPECGUARD_* of the decision); never a token variable",
    )

    @field_validator("rollback", "promote", mode="before")
    @classmethod
    def _argument_lists(cls, value: Any) -> Any:
        value = _argv_only(value)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = [value]  # one command written flat
        if isinstance(value, list):
            for command in value:
                _argv_only(command)
        return value

    @field_validator("rollback", "promote")
    @classmethod
    def _programs(cls, value: list[list[str]]) -> list[list[str]]:
        for argv in value:
            if not argv or not argv[0]:
                raise ValueError("a command is a non-empty argument list whose first item is the program")
            if any(c.isspace() for c in argv[0]):
                raise ValueError(
                    f"argument lists only, never a shell string: the program {argv[0]!r} contains spaces; "
                    "give each argument as its own item"
                )
        return value


class AdminTLS(FiniteModel):
    """The admin API over HTTPS: a PEM certificate (chain) and its private key, both relative to the rollout file."""

    cert: str = Field(description="PEM certificate file")
    key: str = Field(description="PEM private key file")


class Admin(FiniteModel):
    """The admin API: loopback unless ``allow_remote`` is set, always behind a bearer token; off loopback the
    token must be at least ``REMOTE_TOKEN_MIN_BYTES`` long, and TLS (``tls``) is advised (a warning without it)."""

    listen: str = "127.0.0.1:8081"
    allow_remote: bool = Field(default=False, description="required for a listen address that is not loopback")
    token_env: EnvName | None = Field(default=None, description="environment variable holding the bearer token")
    token_file: str | None = Field(default=None, description="file holding the bearer token (relative to the rollout)")
    tls: AdminTLS | None = Field(default=None, description="serve the admin API over HTTPS with this certificate and key")

    @property
    def remote(self) -> bool:
        return not is_loopback(split_listen(self.listen)[0])

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        split_listen(value)
        return value

    @model_validator(mode="after")
    def _safe(self) -> Admin:
        if (self.token_env is None) == (self.token_file is None):
            raise ValueError("give exactly one of 'token_env' or 'token_file' (the admin API always needs a token)")
        host, _ = split_listen(self.listen)
        if not is_loopback(host) and not self.allow_remote:
            raise ValueError(f"{host} is not a loopback address: set 'allow_remote: true' to expose the admin API")
        return self


class State(FiniteModel):
    # An output, so relative to the working directory as ``--out`` is (the token file, an input, is relative to
    # the rollout file as a check plan's prompt files are).
    path: str = Field(default="canary-state.sqlite", description="the SQLite file (relative to the working directory)")


class Rollout(FiniteModel):
    """A rollout file.

    ``engine`` (default ``proxy``) picks the traffic engine. With ``haproxy`` or ``gateway-api``, ``listen`` and
    ``split`` (the proxy's address, stickiness, segments and balancing) are refused if written: that engine
    splits traffic itself, per request as it is configured to. ``pools`` still name the servers whose
    ``/metrics`` the analysis reads; specguard sends them no request itself. With ``gateway-api`` every step's
    percentage must be a whole number of millionths of the traffic (at most four decimals), the resolution of
    the route's integer weights, so that the route carries exactly the step's share.
    """

    name: str = "canary"
    engine: Engine = Field(default_factory=ProxyEngine, description="what moves the traffic")
    listen: str = Field(default="127.0.0.1:8080", description="the proxy's address")
    pools: Pools
    split: Split = Split()
    workers: int = Field(
        default=1,
        ge=1,
        le=MAX_PROXY_WORKERS,
        strict=True,
        description="proxy processes accepting on 'listen' (SO_REUSEPORT), each splitting by the same key hash",
    )
    steps: list[Step] = Field(default_factory=lambda: [Step(percent=p) for p in DEFAULT_STEPS], min_length=1)
    analysis: Analysis = Analysis()
    hooks: Hooks = Hooks()
    admin: Admin
    state: State = State()
    grafana: GrafanaConfig | None = Field(default=None, description="post each decision as a Grafana annotation")
    metrics: Metrics = Field(default_factory=ScrapeMetrics, description="where the pools' server metrics are read")

    @field_validator("engine", mode="wrap")
    @classmethod
    def _engine(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return validate_engine(value, handler)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        split_listen(value)
        return value

    @field_validator("steps", mode="before")
    @classmethod
    def _percent_shorthand(cls, value: Any) -> Any:
        # `steps: [1, 5, 100]` is a step list with the default minimums.
        if isinstance(value, list):
            return [{"percent": v} if isinstance(v, int | float) and not isinstance(v, bool) else v for v in value]
        return value

    @field_validator("steps")
    @classmethod
    def _increasing_to_100(cls, value: list[Step]) -> list[Step]:
        percents = [s.percent for s in value]
        if any(b <= a for a, b in zip(percents, percents[1:], strict=False)):
            raise ValueError(f"step percentages must be strictly increasing (got {percents})")
        if percents[-1] != 100:
            raise ValueError(f"the last step must be 100 % (got {percents[-1]:g})")
        return value

    @model_validator(mode="after")
    def _fits_the_engine(self) -> Rollout:
        problems = _engine_problems(self, self.model_fields_set)
        if problems:
            # Raised with each key's location, so that the error names the line of the key at fault.
            raise ValidationError.from_exception_data(
                "Rollout",
                [
                    InitErrorDetails(type="value_error", loc=loc, input=None, ctx={"error": ValueError(text)})
                    for loc, text in problems
                ],
            )
        return self

    @model_validator(mode="after")
    def _fits_together(self) -> Rollout:
        if isinstance(self.engine, ProxyEngine) and split_listen(self.listen) == split_listen(self.admin.listen):
            raise ValueError(f"the proxy and the admin API cannot both listen on {self.listen}")
        if self.pools.control is not None and any(s.percent > 50 for s in self.steps[:-1]):
            # The control pool takes the candidate's share from the baseline: both fit only up to 50 %.
            raise ValueError("with a control pool, every step before the last is at most 50 %")
        tokens = {self.admin.token_env, getattr(self.metrics, "token_env", None), self.grafana and self.grafana.token_env}
        passed = sorted(set(self.hooks.env) & {t for t in tokens if t})
        if passed:
            raise ValueError(f"hooks.env: {', '.join(passed)} holds a token; a hook never gets a token variable")
        return self

    def stored(self) -> dict[str, Any]:
        """The rollout as its state file keeps it (and reads it back): every key with its value, except the
        proxy's own keys under another engine, which that engine's rollout refuses."""
        exclude = None if isinstance(self.engine, ProxyEngine) else set(PROXY_ONLY_KEYS)
        return self.model_dump(mode="json", exclude=exclude)


def _engine_problems(rollout: Rollout, written: set[str]) -> list[tuple[tuple[str | int, ...], str]]:
    """What of the rollout does not fit its engine, as (key path, why) pairs."""
    engine = rollout.engine
    if isinstance(engine, ProxyEngine):
        return []
    problems: list[tuple[tuple[str | int, ...], str]] = [
        ((key,), f"only the built-in proxy has '{key}'; with engine {engine.type} the engine splits the traffic: remove it")
        for key in PROXY_ONLY_KEYS
        if key in written
    ]
    has_control = rollout.pools.control is not None
    if isinstance(engine, HAProxyEngine) and has_control != bool(engine.control_servers):
        problems.append((("engine", "control_servers"), "'control_servers' are given exactly when the pools have a control pool"))
    if isinstance(engine, GatewayApiEngine):
        if has_control != (engine.backends.control is not None):
            problems.append(
                (("engine", "backends", "control"), "a 'control' backend is given exactly when the pools have a control pool")
            )
        for i, step in enumerate(rollout.steps):
            units = step.percent / 100 * GATEWAY_WEIGHT_TOTAL
            if abs(units - round(units)) > 1e-6:
                problems.append(
                    (
                        ("steps", i, "percent"),
                        "with engine gateway-api a step is a whole number of millionths of the traffic "
                        f"(at most four decimals; got {step.percent!r})",
                    )
                )
    return problems


class RolloutError(InputFileError):
    """A rollout file that cannot be used; the message names the file, the line, the key and what was expected."""


def load_rollout(path: Path) -> Rollout:
    """The rollout file at ``path``, validated; a relative token file made relative to it."""
    rollout = load_yaml_model(path, Rollout, RolloutError, "rollout file")
    if rollout.admin.token_file is not None and not Path(rollout.admin.token_file).is_absolute():
        rollout.admin.token_file = str((path.parent / rollout.admin.token_file).resolve())
    tls = rollout.admin.tls
    if tls is not None:
        tls.cert, tls.key = (str((path.parent / f).resolve()) if not Path(f).is_absolute() else f for f in (tls.cert, tls.key))
    return rollout
