"""``specguard sim serve``'s options, for the ``sim`` sub-app to register (``register_serve(sim_app)``).

The options go through ``SimRequest``, as ``sim run``'s do, so a bad value is the same one-line ``OptionError``
(exit 2); ``rates`` are irrelevant to a server that takes the client's load, and are set to a placeholder.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specguard.errors import OptionError
from specguard.sim.acceptance import parse_acceptance
from specguard.sim.run import SimRequest
from specguard.validation import finite, given, options

SERVE_OPTIONS = {
    "target": "--target",
    "gpu": "--gpu",
    "tensor_parallel_size": "--tp",
    "method": "--method",
    "draft": "--draft",
    "num_speculative_tokens": "--num-speculative-tokens",
    "acceptance": "--acceptance",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "seed": "--seed",
}


def serve_request(
    target: str,
    gpu: str,
    tp: int | None = None,
    method: str | None = None,
    draft: str | None = None,
    num_speculative_tokens: int | None = None,
    acceptance: str | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    seed: int | None = None,
) -> SimRequest:
    values = given(
        target=target,
        gpu=gpu,
        tensor_parallel_size=tp,
        method=method,
        draft=draft,
        num_speculative_tokens=num_speculative_tokens,
        acceptance=parse_acceptance(acceptance),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        seed=seed,
    )
    return options(SimRequest, {**values, "rates": [1.0]}, SERVE_OPTIONS)


def register_serve(sim_app: typer.Typer) -> None:
    @sim_app.command("serve")
    def serve_command(
        target: Annotated[str, typer.Option(help="Catalog name (llama-3.1-70b, qwen3-8b, ...) or a local HF directory.")],
        gpu: Annotated[str, typer.Option(help="h100-80gb, h200-141gb, a100-80gb, l40s, b200...")],
        tp: Annotated[int | None, typer.Option("--tp", help="Tensor parallelism of the target.")] = None,
        method: Annotated[
            str | None, typer.Option(help="ngram, suffix, draft_model, eagle, eagle3, mtp; none: no speculation.")
        ] = None,
        draft: Annotated[str | None, typer.Option(help="Draft model or EAGLE head: catalog name or local directory.")] = None,
        num_speculative_tokens: Annotated[int | None, typer.Option(help="k (default: the --acceptance length, else 4).")] = None,
        acceptance: Annotated[
            str | None, typer.Option(help="Per-position acceptance, e.g. 0.8,0.6,0.4 (default: 0.7^i, assumed).")
        ] = None,
        max_num_seqs: Annotated[int | None, typer.Option(help="vLLM's max_num_seqs (default: vLLM's for the --gpu).")] = None,
        max_num_batched_tokens: Annotated[
            int | None, typer.Option(help="vLLM's max_num_batched_tokens (default: vLLM's for the --gpu).")
        ] = None,
        host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
        served_model_name: Annotated[str, typer.Option(help="The model name clients ask for.")] = "sim",
        time_scale: Annotated[float, typer.Option(help="Wall seconds per simulated second (2: everything twice as slow).")] = 1.0,
        seed: Annotated[int | None, typer.Option(help="Seed of the acceptance draws.")] = None,
    ) -> None:
        """A simulated vLLM in real time: an OpenAI-compatible streaming server whose timing is the engine model's.

        Every response carries X-Specguard-Simulated: true and /version says simulated; nothing it reports is measured.
        """
        from specguard.sim.serve import serve

        finite(time_scale, "--time-scale", positive=True)
        if not 0 < port < 65536:
            raise OptionError(f"--port {port}: expected 1 to 65535")
        req = serve_request(
            target, gpu, tp, method, draft, num_speculative_tokens, acceptance, max_num_seqs, max_num_batched_tokens, seed
        )
        typer.echo(f"specguard sim serve: SIMULATED vLLM on http://{host}:{port} (model {served_model_name!r})", err=True)
        serve(req, host, port, served_model_name, time_scale)
