"""What ``specguard inventory`` is asked (``InventoryRequest``), and :func:`build_inventory`, which answers it.

The inventory's source is a running server (``url``), a launch line
(``command``) or one arm of a check plan; every option is checked before the
server is asked or the plan's embedded models are looked for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from specguard.errors import OptionError, ServerError
from specguard.inventory.model import Inventory
from specguard.validation import output_file, refuse_existing, text_option, url_option

ArmName = Literal["baseline", "candidate"]
PlanArm = Callable[[Path, ArmName | None], tuple[list[str] | None, str | None]]
"""A check plan's arm -> (its server arguments, or None; its URL, or None): ``check/launchers/embedded.plan_arm``."""


class InventoryRequest(BaseModel):
    """One ``specguard inventory`` invocation, options as given."""

    model_config = ConfigDict(frozen=True)

    url: str | None = None
    command: str | None = None
    config: str | None = None
    gpu: str | None = None
    plan_path: Path | None = None
    arm: ArmName | None = None
    runs: list[Path] = []
    api_key: str | None = None
    out_path: Path = Path("inventory.json")
    force: bool = False


def build_inventory(req: InventoryRequest, plan_arm: PlanArm | None = None) -> Inventory:
    """The inventory of the request's source, with the running server's facts where there is one.

    ``plan_arm`` reads a check plan's arm (given with ``plan_path``); it comes from the caller because the check,
    which knows plans and the embedded runtime, sits above the inventory.
    """
    from specguard.inventory.collect import from_args, from_server, lengths_from_runs
    from specguard.server_metrics.server_facts import inspect_server
    from specguard.vllm.serve_inputs import load_command, load_config

    _check_options(req)
    args = load_command(req.command) if req.command is not None else None
    url = req.url
    if req.plan_path is not None:
        assert plan_arm is not None, "a request with plan_path needs plan_arm"
        launch_args, endpoint_url = plan_arm(req.plan_path, req.arm)
        args, url = args or launch_args, url or endpoint_url
    cfg = load_config(req.config) if req.config is not None else None
    lengths = lengths_from_runs(req.runs)
    facts = inspect_server(url, req.api_key) if url else None
    if facts is not None and not facts.reachable:
        raise ServerError(f"{url}: not reachable ({'; '.join(facts.errors)})")
    if args is not None:
        what = f"arm '{req.arm}' of {req.plan_path}" if req.plan_path else "command line"
        return from_args(args, what + (f" and running server {url}" if url else ""), facts, req.gpu, lengths)
    assert facts is not None  # _check_options: with neither --command nor --plan, --url was given
    return from_server(facts, cfg, req.gpu, lengths)


def _check_options(req: InventoryRequest) -> None:
    if req.url is None and req.command is None and req.plan_path is None:
        raise OptionError("give --url (a running server), --command (its launch line) or --plan with --arm")
    if req.arm is not None and req.plan_path is None:
        raise OptionError("--arm goes with --plan (which check plan's arm to record)")
    url_option(req.url)
    text_option(req.command, "--command")
    text_option(req.config, "--config")
    if not req.force:
        refuse_existing([req.out_path], "--out")
    output_file(req.out_path, "--out")
