"""The rollout file's ``engine:`` section: which traffic engine moves the candidate's share, and how to reach it.

``engine: proxy`` (the default, also when the key is absent) is specguard's own proxy. ``haproxy`` names an
HAProxy runtime API socket, the backend and its baseline and speculative servers. ``gateway-api`` names the
Kubernetes ``HTTPRoute`` specguard renders at every step, its parent Gateway and the two backends (Services,
or ``InferencePool``s of the Gateway API Inference Extension). A pydantic union discriminated by ``type``;
``engine: proxy`` written as a bare word is the same as ``engine: {type: proxy}``.

Names are checked here, where the error can still name the line of the rollout file, rather than by the
API server or HAProxy in the middle of a rollout: Kubernetes names follow RFC 1123 / RFC 1035 as the API
server checks them (Service names are RFC 1035 labels, other objects RFC 1123 subdomains, namespaces RFC 1123
labels), HAProxy names use only the characters its configuration parser accepts (letters, digits, ``-``,
``_``, ``.``, ``:``), which also keeps ``set server BACKEND/SERVER`` unambiguous.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Final, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from specguard.canary.spec.validators import bare_word_union
from specguard.canary.spec.vocabulary import PoolName
from specguard.models_base import FiniteModel

__all__ = [
    "GATEWAY_WEIGHT_TOTAL",
    "INFERENCE_POOL_GROUP",
    "BackendRef",
    "Engine",
    "GatewayApiEngine",
    "GatewayBackends",
    "HAProxyEngine",
    "ParentRef",
    "ProxyEngine",
    "validate_engine",
]

INFERENCE_POOL_GROUP: Final = "inference.networking.k8s.io"
# The HTTPRoute weights specguard renders sum to this, the most one backendRef may carry (the v1 schema's
# maximum): at 100 % the candidate carries all of it, so no finer scale fits, and 1 % is 10,000 exactly.
GATEWAY_WEIGHT_TOTAL = 1_000_000

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # RFC 1123 label: namespaces
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # RFC 1035 label: Service names
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HAPROXY_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")
_HAPROXY_HEADER = re.compile(r"^[A-Za-z0-9_-]+$")
# sockaddr_un.sun_path is 108 bytes on Linux, one of them the terminating NUL: a longer path cannot be connected to.
_MAX_SOCKET_PATH_BYTES = 107


def _k8s_name(value: str, what: str, pattern: re.Pattern[str], limit: int, rule: str) -> str:
    if len(value) > limit or not pattern.match(value):
        raise ValueError(f"not a Kubernetes {what} name: {rule}, at most {limit} characters (got {value!r})")
    return value


def _subdomain(value: str, what: str) -> str:
    return _k8s_name(value, what, _DNS_SUBDOMAIN, 253, "lower-case letters, digits, '-' and '.', alphanumeric at both ends")


def _namespace(value: str | None) -> str | None:
    if value is None:
        return None
    return _k8s_name(value, "namespace", _DNS_LABEL, 63, "lower-case letters, digits and '-', alphanumeric at both ends")


class ProxyEngine(FiniteModel):
    """specguard's own proxy (``listen``, ``split``): the single-host default and today's behaviour."""

    type: Literal["proxy"] = "proxy"


class HAProxyEngine(FiniteModel):
    """HAProxy driven through its runtime API: the baseline and speculative servers are members of one backend.

    Weights are set with ``set server BACKEND/SERVER weight N`` on ``socket`` (the ``stats socket`` of the
    HAProxy configuration, with ``level admin``); a rollback sets the speculative servers' weight to 0 and, with
    ``drain``, also puts them in drain mode. ``control_servers`` are given exactly when the rollout has a
    control pool.

    ``sticky_header`` is what ``specguard canary haproxy-config`` makes the sticky key: requests with the same
    value of that header go to the same server (``balance hdr(NAME)`` with ``hash-type consistent``), those
    without it round-robin. It lives here, not in ``split``, because with this engine the rollout refuses
    ``split`` (no proxy runs); the driver itself does not need it. Letters, digits, ``-`` and ``_`` only: the
    name is written into the HAProxy configuration, where other token characters (``#``) would be syntax.
    """

    type: Literal["haproxy"]
    socket: str = Field(description="absolute path of HAProxy's runtime API (stats) socket")
    backend: str = Field(description="the backend holding both pools' servers")
    baseline_servers: list[str] = Field(min_length=1)
    candidate_servers: list[str] = Field(min_length=1, description="the speculative servers")
    control_servers: list[str] = Field(default_factory=list)
    drain: bool = Field(default=False, description="on rollback, also set the speculative servers to drain")
    sticky_header: str | None = Field(default=None, description="the sticky key's header in the generated haproxy.cfg")

    @field_validator("socket")
    @classmethod
    def _socket_path(cls, value: str) -> str:
        if not os.path.isabs(value):
            raise ValueError(f"an absolute path, as HAProxy's 'stats socket' line has it (got {value!r})")
        if len(os.fsencode(value)) > _MAX_SOCKET_PATH_BYTES:
            raise ValueError(f"a Unix socket path is at most {_MAX_SOCKET_PATH_BYTES} bytes (got {len(os.fsencode(value))})")
        return value

    @field_validator("backend")
    @classmethod
    def _backend_name(cls, value: str) -> str:
        return _haproxy_name(value)

    @field_validator("baseline_servers", "candidate_servers", "control_servers")
    @classmethod
    def _server_names(cls, value: list[str]) -> list[str]:
        for name in value:
            _haproxy_name(name)
        return value

    @field_validator("sticky_header")
    @classmethod
    def _header(cls, value: str | None) -> str | None:
        if value is not None and not _HAPROXY_HEADER.match(value):
            raise ValueError(f"a header name of letters, digits, '-' and '_' (got {value!r})")
        return value.lower() if value else value

    @model_validator(mode="after")
    def _each_server_once(self) -> HAProxyEngine:
        # One server in two pools would compare a server with itself, as Pools refuses for URLs.
        seen: dict[str, str] = {}
        for pool in ("baseline", "candidate", "control"):
            for name in getattr(self, f"{pool}_servers"):
                if name in seen:
                    where = "twice" if seen[name] == pool else f"in both the {seen[name]} and the {pool} servers"
                    raise ValueError(f"server {name!r} is listed {where}")
                seen[name] = pool
        return self

    def pool_servers(self) -> dict[PoolName, list[str]]:
        """The HAProxy server names of each pool (control's list empty without a control pool)."""
        return {"baseline": self.baseline_servers, "candidate": self.candidate_servers, "control": self.control_servers}


def _haproxy_name(value: str) -> str:
    if not _HAPROXY_NAME.match(value):
        raise ValueError(f"not an HAProxy name: letters, digits, '-', '_', '.' and ':' only (got {value!r})")
    return value


class ParentRef(FiniteModel):
    """The Gateway the route attaches to; ``section_name`` (also spelt ``sectionName``) picks one of its listeners."""

    name: str
    namespace: str | None = Field(default=None, description="default: the route's namespace")
    section_name: str | None = Field(default=None, validation_alias=AliasChoices("section_name", "sectionName"))

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _subdomain(value, "Gateway")

    @field_validator("namespace")
    @classmethod
    def _ns(cls, value: str | None) -> str | None:
        return _namespace(value)

    @field_validator("section_name")
    @classmethod
    def _section(cls, value: str | None) -> str | None:
        return None if value is None else _subdomain(value, "listener (sectionName)")


class BackendRef(FiniteModel):
    """One backend of the route: a ``Service`` (with the port it serves vLLM on) or an ``InferencePool``.

    An InferencePool (group ``inference.networking.k8s.io``, the Gateway API Inference Extension, as llm-d and
    the vLLM production stack expose vLLM pools) takes no port: the pool's own ``targetPorts`` say where its
    servers listen. A Service needs one, as the HTTPRoute's rule ("Must have port for Service reference") does.
    """

    kind: Literal["Service", "InferencePool"] = "Service"
    name: str
    namespace: str | None = Field(default=None, description="default: the route's namespace")
    port: int | None = Field(default=None, ge=1, le=65535)
    group: Literal["", "inference.networking.k8s.io"] | None = Field(
        default=None, description="default: '' (core) for a Service, inference.networking.k8s.io for an InferencePool"
    )

    @field_validator("namespace")
    @classmethod
    def _ns(cls, value: str | None) -> str | None:
        return _namespace(value)

    @model_validator(mode="after")
    def _fits_the_kind(self) -> BackendRef:
        if self.kind == "Service":
            _k8s_name(self.name, "Service", _DNS_1035, 63, "lower-case letters, digits and '-', starting with a letter")
            if self.port is None:
                raise ValueError("a Service backend needs 'port' (the port its vLLM servers are reached on)")
            if self.group not in (None, ""):
                raise ValueError(f"a Service is in the core group '' (got {self.group!r})")
            self.group = ""
        else:
            _subdomain(self.name, "InferencePool")
            if self.port is not None:
                raise ValueError("an InferencePool backend takes no 'port': the pool's targetPorts say where it listens")
            if self.group not in (None, INFERENCE_POOL_GROUP):
                raise ValueError(f"an InferencePool is in the group {INFERENCE_POOL_GROUP!r} (got {self.group!r})")
            self.group = INFERENCE_POOL_GROUP
        return self


class GatewayBackends(FiniteModel):
    baseline: BackendRef
    candidate: BackendRef
    control: BackendRef | None = Field(default=None, description="given exactly when the rollout has a control pool")

    @model_validator(mode="after")
    def _distinct(self) -> GatewayBackends:
        refs = [(n, r) for n in ("baseline", "candidate", "control") if (r := getattr(self, n)) is not None]
        keys = [(r.group, r.kind, r.namespace, r.name, r.port) for _, r in refs]
        if len(set(keys)) != len(keys):
            raise ValueError("the backends must be distinct: one backend in two roles compares it with itself")
        return self


class GatewayApiEngine(FiniteModel):
    """A Kubernetes Gateway API ``HTTPRoute`` (``gateway.networking.k8s.io/v1``), rendered at every step.

    Each step's route is written to ``out_dir`` (relative to the working directory, as the state file is): one
    file per step and weight, and the current one, each replaced atomically, for a GitOps pipeline to pick up.
    With ``apply: true`` specguard also runs ``kubectl apply -f`` on the current file, with kubectl's own
    configuration (``KUBECONFIG``, the current context), each call bounded by ``kubectl_timeout_s``, and reads
    the route back every window (``kubectl get httproute``): its weights, and the Gateway's ``Accepted`` and
    ``ResolvedRefs`` conditions once ``status_wait_s`` has passed since the apply.
    """

    type: Literal["gateway-api"]
    route: str = Field(description="the HTTPRoute's name")
    namespace: str = Field(description="the HTTPRoute's namespace")
    gateway: ParentRef
    backends: GatewayBackends
    out_dir: str = Field(default="gateway-api", min_length=1, description="where the rendered routes are written")
    apply: bool = Field(default=False, description="also 'kubectl apply -f' each rendered route")
    kubectl_timeout_s: float = Field(default=60.0, gt=0, description="per kubectl call")
    status_wait_s: float = Field(
        default=30.0,
        gt=0,
        description="with apply: how long the Gateway may take to report (status.parents) on a generation of "
        "the route after it was applied, before a missing or older report is drift",
    )

    @field_validator("route")
    @classmethod
    def _route(cls, value: str) -> str:
        return _subdomain(value, "HTTPRoute")

    @field_validator("namespace")
    @classmethod
    def _ns(cls, value: str) -> str:
        _namespace(value)
        return value


Engine = Annotated[ProxyEngine | HAProxyEngine | GatewayApiEngine, Field(discriminator="type")]


# A bare word is ``{type: WORD}``; an error's location loses the union's tag, so that it names the file's key.
validate_engine = bare_word_union("type")
