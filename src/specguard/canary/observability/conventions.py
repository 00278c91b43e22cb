"""How the generated rules tell pools apart, and the windows they look over: one place for every module.

vLLM's own series carry ``model_name`` and ``engine`` but nothing that says which canary pool a server is in,
so the operator's scrape configuration adds ``specguard_pool`` (``baseline``, ``candidate``, ``control``) as
a target label; the header of each generated file shows the ``scrape_configs`` for the rollout's servers.
The proxy's own metrics already carry ``pool``; the rules copy it into ``specguard_pool`` so that every
recorded series and every alert has the same label. Segments: vLLM's series know only the model, so with
``split.segment.source: model`` the server-side rules keep ``model_name`` (that is the segment); the
proxy's error series carry ``segment`` whatever the source, and its rules keep it.

Windows follow the rollout's analysis: rates over one analysis window (at least 60 s, four scrapes at
Prometheus' default 15 s), and an alert fires after ``rollback_windows`` windows, as the controller rolls
back after that many failing windows.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from specguard.canary.spec.rollout import Rollout

__all__ = [
    "POOL_LABEL",
    "PROXY_JOB",
    "RESTART_LOOKBACK",
    "Windows",
    "pool_targets",
    "scrape_config_lines",
    "server_group_labels",
    "windows",
]

POOL_LABEL = "specguard_pool"
PROXY_JOB = "specguard-canary-proxy"
MIN_RATE_WINDOW_S = 60
# A restart is visible for this long after it happened: long enough for an evaluation and a notification.
RESTART_LOOKBACK = "15m"


class Windows:
    """The rate window and the alerts' ``for``, as PromQL durations."""

    def __init__(self, rate_s: int, for_s: int) -> None:
        self.rate_s = rate_s
        self.for_s = for_s

    @property
    def rate(self) -> str:
        return f"{self.rate_s}s"

    @property
    def hold(self) -> str:
        return f"{self.for_s}s"


def windows(rollout: Rollout) -> Windows:
    rate_s = max(MIN_RATE_WINDOW_S, int(-(-rollout.analysis.window_s // 1)))
    return Windows(rate_s=rate_s, for_s=rate_s * rollout.analysis.rollback_windows)


def server_group_labels(rollout: Rollout) -> tuple[str, ...]:
    """The labels server-side rules aggregate by: the pool, and the model where the model is the segment."""
    return (POOL_LABEL, "model_name") if rollout.split.segment.source == "model" else (POOL_LABEL,)


def pool_targets(rollout: Rollout) -> dict[str, list[tuple[str, str]]]:
    """Each pool's scrape targets as (``host:port``, metrics path), from the servers' metrics (or base) URLs."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name in ("baseline", "candidate", "control"):
        pool = getattr(rollout.pools, name)
        if pool is None:
            continue
        targets = []
        for server in pool.servers:
            url = urlsplit(server.metrics_url or server.base_url.rstrip("/") + "/metrics")
            targets.append((url.netloc, url.path or "/metrics"))
        out[name] = targets
    return out


def scrape_config_lines(rollout: Rollout) -> list[str]:
    """A ``scrape_configs`` excerpt that labels the rollout's servers with their pool, as comment text."""
    lines = ["scrape_configs:"]
    for pool, targets in pool_targets(rollout).items():
        paths = sorted({path for _, path in targets})
        if not targets:
            lines.append(f"  # {pool}: launched by specguard (no servers listed): add its server here by hand")
            continue
        for path in paths:
            hosts = ", ".join(f'"{host}"' for host, p in targets if p == path)
            lines += [
                f"  - job_name: vllm-{pool}" + ("" if len(paths) == 1 else f"-{paths.index(path)}"),
                f"    metrics_path: {path}",
                f"    static_configs: [{{targets: [{hosts}], labels: {{{POOL_LABEL}: {pool}}}}}]",
            ]
    lines += [
        f"  - job_name: {PROXY_JOB}   # the controller's (and proxy's) series on the admin listener, bearer token",
        f'    static_configs: [{{targets: ["{rollout.admin.listen}"]}}]',
        "    authorization: {credentials_file: /etc/prometheus/specguard-canary.token}",
    ]
    return lines
