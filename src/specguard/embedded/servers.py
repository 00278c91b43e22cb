"""Server specs for the embedded model set: baseline, n-gram, suffix-decoding and draft-model speculation."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from specguard.embedded.models import ModelSet
from specguard.embedded.runtime import VllmRuntime, specguard_home
from specguard.vllm.process import ManagedServer
from specguard.vllm.server_spec import ServerSpec

EmbeddedKind = Literal["baseline", "ngram", "suffix", "draft_model"]
SERVED_NAME = "specguard-tiny"

# The embedded servers share two cores with the load generator. A 1 GiB KV cache is ample for the tiny
# models and keeps two servers within 2 x 3 GB. Intel OpenMP's threads spin for 200 ms after each
# parallel region by default; on shared cores that starved the client (event-loop lag p99 92 ms under
# concurrency 8, 3.8 ms with KMP_BLOCKTIME=0, at the same throughput).
#
# Start-up: vLLM's CPU platform runs the model in a worker process of its own, one more import of torch and vLLM
# (~14 s on 2 cores), unless V1 multiprocessing is off, when the engine core runs it itself; and its default
# AOT compile cache fails to load on this build ("'function' object has no attribute 'finalize_loading'") and
# recompiles every time (~23 s), where torch.compile's own cache loads. Measured here, one server on an idle
# machine: start 62 s -> 40 s (n-gram 37 s), five 64-token requests 2.7 s -> 1.4 s. A CPU server's speed is
# not a GPU's either way; the embedded servers are for trying specguard and testing it.
EMBEDDED_SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "KMP_BLOCKTIME": "0",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_USE_AOT_COMPILE": "0",
}

NGRAM_CONFIG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
# vLLM's suffix defaults written out (tree depth 24, min token probability 0.1, up to 24 tokens a step): the
# configuration `assess` predicts first. Needs Arctic Inference in the runtime (runtime.py installs it).
SUFFIX_CONFIG = {
    "method": "suffix",
    "num_speculative_tokens": 24,
    "suffix_decoding_max_tree_depth": 24,
    "suffix_decoding_min_token_prob": 0.1,
}


def embedded_spec(models: ModelSet, kind: EmbeddedKind, max_model_len: int = 1024, port: int | None = None) -> ServerSpec:
    spec_cfg: dict[str, object] | None = None
    if kind == "ngram":
        spec_cfg = dict(NGRAM_CONFIG)
    elif kind == "suffix":
        spec_cfg = dict(SUFFIX_CONFIG)
    elif kind == "draft_model":
        spec_cfg = {"method": "draft_model", "model": str(models.path("draft")), "num_speculative_tokens": 3}
    return ServerSpec(
        model=str(models.path("target")),
        served_model_name=SERVED_NAME,
        port=port,
        max_model_len=max_model_len,
        speculative_config=spec_cfg,
        env=dict(EMBEDDED_SERVER_ENV),
    )


def embedded_server(runtime: VllmRuntime, spec: ServerSpec, label: str, log_dir: Path | None = None) -> ManagedServer:
    log_dir = log_dir or specguard_home() / "logs"
    return ManagedServer(spec, runtime.serve_argv, log_dir / f"{label}.log", runtime_env=runtime.env)
