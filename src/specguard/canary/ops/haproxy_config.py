"""``specguard canary haproxy-config``: the HAProxy configuration that matches a rollout with ``engine: haproxy``.

One backend holds the baseline's, the candidate's (and the control's) servers, named as the rollout's
``engine`` names them and addressed by the pools' base URLs, paired in order; the stats socket is the one the
driver talks to, with ``level admin`` (``set server`` needs it). Every server starts at the weights of a
canary that has not started (baseline 100 %, the speculative servers at 0): the controller sets the first
step itself. Health checks ask ``GET /health`` (vLLM answers 200 once its engine is up); a server that fails
them gets no traffic, whatever its weight. With ``sticky_header`` the backend hashes that header
consistently, so a client stays on one server while the weights change; without it, round robin. Both are
HAProxy's "dynamic" algorithms, the ones whose weights the runtime API can change.

``render_haproxy_config`` is pure; ``write_haproxy_config`` writes it atomically and refuses to overwrite.
"""

from __future__ import annotations

import ipaddress
import math
import os
from pathlib import Path
from urllib.parse import urlsplit

from specguard.canary.routers.haproxy import haproxy_weights
from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.rollout import Pool, Rollout, split_listen
from specguard.errors import InputFileError, OptionError, OutputExistsError, OutputWriteError

__all__ = ["DEFAULT_BIND", "DEFAULT_TIMEOUT_SERVER_S", "render_haproxy_config", "server_address", "write_haproxy_config"]

DEFAULT_BIND = "127.0.0.1:8080"  # the built-in proxy's default listen address: clients need no change
# A completion of 8,192 tokens at 20 tokens/s runs about 7 minutes; a queued request waits before that. Half an
# hour leaves room for both; an operator with longer requests passes --timeout-server-s.
DEFAULT_TIMEOUT_SERVER_S = 1800.0


def server_address(base_url: str, where: str) -> tuple[str, bool]:
    """``host:port`` for an HAProxy ``server`` line and whether it is TLS; InputFileError naming ``where`` if it
    cannot be one (a path, credentials, a query: HAProxy forwards the client's path as it is)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https"):
        raise InputFileError(f"{where}: {base_url!r} is not an http:// or https:// URL")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise InputFileError(
            f"{where}: {base_url!r} has a path, query or credentials; an HAProxy server is an address and a port "
            "(the client's path is forwarded as it is)"
        )
    host = parts.hostname
    if not host:
        raise InputFileError(f"{where}: {base_url!r} has no host")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"{host}:{port}", tls


def _servers(engine: HAProxyEngine, rollout: Rollout) -> list[tuple[str, str, bool]]:
    pools: list[tuple[str, list[str], Pool | None]] = [
        ("baseline", engine.baseline_servers, rollout.pools.baseline),
        ("candidate", engine.candidate_servers, rollout.pools.candidate),
        ("control", engine.control_servers, rollout.pools.control),
    ]
    out: list[tuple[str, str, bool]] = []
    for pool, names, spec in pools:
        urls = [s.base_url for s in spec.servers] if spec is not None else []
        if len(urls) != len(names):
            raise InputFileError(
                f"engine.{pool}_servers names {len(names)} server(s) but pools.{pool}.servers lists {len(urls)}: "
                "HAProxy's servers are the pool's base URLs, named in the same order"
            )
        for i, (name, url) in enumerate(zip(names, urls, strict=True)):
            out.append((name, *server_address(url, f"pools.{pool}.servers[{i}]")))
    return out


def render_haproxy_config(
    rollout: Rollout, *, bind: str = DEFAULT_BIND, timeout_server_s: float = DEFAULT_TIMEOUT_SERVER_S, source: str = ""
) -> str:
    """The haproxy.cfg text for ``rollout`` (its engine must be haproxy), its frontend listening on ``bind``."""
    engine = rollout.engine
    if not isinstance(engine, HAProxyEngine):
        raise InputFileError(f"engine is {engine.type!r}: haproxy-config writes the configuration of 'engine: haproxy'")
    try:
        host, port = split_listen(bind)
    except ValueError as exc:
        raise OptionError(f"--bind: {exc}") from exc
    if not math.isfinite(timeout_server_s) or timeout_server_s <= 0:
        raise OptionError(f"--timeout-server-s must be positive (got {timeout_server_s!r})")
    bind_addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    servers = _servers(engine, rollout)
    weights = haproxy_weights(engine, 0.0, 0.0)
    t = f"{int(timeout_server_s)}s" if float(timeout_server_s).is_integer() else f"{int(timeout_server_s * 1000)}ms"
    balance = (
        [
            f"    # Sticky: one value of {engine.sticky_header} always hashes to the same server; consistent hashing moves",
            "    # only the keys of servers whose weight changed. A request without the header is round-robined.",
            f"    balance hdr({engine.sticky_header})",
            "    hash-type consistent",
        ]
        if engine.sticky_header
        else ["    # Per request: no sticky header in the rollout's engine section (sticky_header).", "    balance roundrobin"]
    )
    lines = [
        f"# Written by 'specguard canary haproxy-config'{f' from {source}' if source else ''} (rollout {rollout.name}).",
        "# specguard changes the server weights at run time through the stats socket; the weights below are a",
        "# canary that has not started (the baseline takes everything). Check it with: haproxy -c -f THIS_FILE",
        "global",
        "    # The runtime API specguard drives ('set server B/S weight N', 'show servers state B'): level admin is",
        "    # what 'set server' needs; mode 600 keeps it to HAProxy's user, so run specguard as that user (or add",
        "    # 'user'/'group' here). The socket's directory must exist.",
        f"    stats socket {engine.socket} mode 600 level admin",
        "    stats timeout 30s",
        "",
        "defaults",
        "    mode http",
        "    timeout connect 5s",
        "    # The client and server timeouts are inactivity timeouts, but a request can be silent for its whole",
        "    # length: a non-streamed completion sends nothing until it is done, and a streamed one nothing while",
        "    # it waits in vLLM's queue. An SSE stream can run minutes, so 'timeout server' must exceed the longest",
        f"    # request, or HAProxy cuts it with a 504 (or mid-stream). {t} here (--timeout-server-s).",
        f"    timeout client {t}",
        f"    timeout server {t}",
        "    timeout http-request 30s",
        "    timeout http-keep-alive 60s",
        "    timeout queue 60s",
        "    timeout check 5s",
        "    # A connection that fails (a server going down) is tried again on another server; a request that",
        "    # reached a server is never replayed (a completion is not idempotent to pay for twice).",
        "    retries 2",
        "    option redispatch 1",
        "    # Streamed tokens are small writes: without this, HAProxy lets the kernel hold them back (MSG_MORE) and",
        "    # they arrive in bursts. bench/proxy_overhead.py measured p99 chunk delivery +218 ms through this file",
        "    # without it, +5.9 ms with it (2 shared vCPUs, 256 streams).",
        "    option http-no-delay",
        "",
        "frontend specguard_canary",
        f"    bind {bind_addr}",
        f"    default_backend {engine.backend}",
        "",
        f"backend {engine.backend}",
        *balance,
        "    # vLLM answers /health with 200 once its engine is up; a server failing 3 checks gets no traffic.",
        "    option httpchk GET /health",
        "    http-check expect status 200",
        "    default-server check inter 2s fall 3 rise 2",
    ]
    for name, address, tls in servers:
        lines.append(f"    server {name} {address} weight {weights[name]}{_tls(address) if tls else ''}")
    return "\n".join(lines) + "\n"


def _tls(address: str) -> str:
    """TLS to the server, its certificate verified against the system's CAs, with SNI for a host name (an IP
    address is no SNI name, RFC 6066). A host name is resolved once, when HAProxy starts (libc)."""
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        ipaddress.ip_address(host)
        sni = ""
    except ValueError:
        sni = f" sni str({host})"
    return f" ssl verify required ca-file @system-ca{sni}"


def write_haproxy_config(
    rollout: Rollout,
    out: Path,
    *,
    force: bool = False,
    bind: str = DEFAULT_BIND,
    timeout_server_s: float = DEFAULT_TIMEOUT_SERVER_S,
    source: str = "",
) -> Path:
    """Write the configuration to ``out`` atomically; OutputExistsError if it exists and ``force`` is not set."""
    text = render_haproxy_config(rollout, bind=bind, timeout_server_s=timeout_server_s, source=source)
    out = out.absolute()
    if out.is_dir():
        raise OutputExistsError(f"--out {out}: is a directory; give the configuration file's path")
    if out.exists() and not force:
        raise OutputExistsError(f"--out {out}: already exists; pass --force to replace it")
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        raise OutputWriteError(f"--out {out}: {exc}") from exc
    return out
