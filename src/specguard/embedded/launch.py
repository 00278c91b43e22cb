"""``embedded:NAME`` in a launch spec (a check plan's arm, a canary's pool) resolved to the local model set.

This happens before the specs reach what starts them (``check/runner.py``, the canary's pools), which only
start the specs they are given. A plan keeps its ``embedded:`` names as written (its record and hash do not
depend on where the models are stored). The check's launcher on the embedded runtime is
``check/launchers/embedded.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

from specguard.embedded.models import ModelSet
from specguard.embedded.servers import EMBEDDED_SERVER_ENV, SERVED_NAME
from specguard.vllm.server_spec import LaunchSpec, ServerSpec

EMBEDDED_PREFIX = "embedded:"


def server_spec_for(launch: LaunchSpec, models: ModelSet | None, port: int | None) -> ServerSpec:
    """A launch spec (a check plan's arm, a canary's pool) as a server spec, ``embedded:`` names made paths into ``models``."""
    spec = launch.model_dump(exclude={"startup_timeout_s"})
    spec["port"] = port
    if spec["model"].startswith(EMBEDDED_PREFIX):
        assert models is not None
        spec["model"] = str(models.path(spec["model"].split(":", 1)[1]))
        spec["served_model_name"] = spec["served_model_name"] or SERVED_NAME
        spec["env"] = {**EMBEDDED_SERVER_ENV, **spec["env"]}
    cfg = spec.get("speculative_config")
    if cfg and isinstance(cfg.get("model"), str) and cfg["model"].startswith(EMBEDDED_PREFIX):
        assert models is not None
        spec["speculative_config"] = {**cfg, "model": str(models.path(cfg["model"].split(":", 1)[1]))}
    return ServerSpec.model_validate(spec)


def launches_embedded(launches: Iterable[LaunchSpec | None]) -> bool:
    """Whether any of these launch specs names an ``embedded:`` model (then the model set must be installed)."""
    return any(EMBEDDED_PREFIX in launch.model_dump_json() for launch in launches if launch is not None)
