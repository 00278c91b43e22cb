"""Build an inventory from a launch spec, a ``vllm serve`` command line or a running server."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from specguard import __version__
from specguard.inventory.model import Inventory, KvHeadroom, ModelIdentity
from specguard.server_metrics.server_facts import ServerFacts
from specguard.vllm import knowledge as K
from specguard.vllm.serve_command import extract_speculation, model_argument, option_value
from specguard.vllm.server_spec import ServerSpec, build_argv

# Hashing a 140 GB checkpoint on every benchmark is not an option: big files are fingerprinted by their size
# and their first and last 16 MiB, which changes whenever a re-download or re-quantization changes them.
FULL_HASH_LIMIT = 256 * 1024**2
SAMPLE = 16 * 1024**2
HASH_METHOD = "sha256 over (relative path, size, content) of every file; files over 256 MiB: first and last 16 MiB"


def _file_digest(path: Path, h: Any) -> None:
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size <= FULL_HASH_LIMIT:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        else:
            h.update(fh.read(SAMPLE))
            fh.seek(size - SAMPLE)
            h.update(fh.read(SAMPLE))


def content_hash(directory: Path) -> str:
    h = hashlib.sha256()
    # A hub download keeps lock files under .cache/ inside the directory: they are not the model.
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and ".cache" not in p.relative_to(directory).parts):
        rel = path.relative_to(directory).as_posix()
        h.update(f"{rel}\0{path.stat().st_size}\0".encode())
        _file_digest(path, h)
    return "sha256:" + h.hexdigest()


def identity(name: str, revision: str | None = None) -> ModelIdentity:
    path = Path(name)
    if path.is_dir():
        return ModelIdentity(name=name, revision=revision, content_hash=content_hash(path), hash_method=HASH_METHOD)
    return ModelIdentity(name=name, revision=revision)


def detect_gpu() -> str:
    """The local GPUs as nvidia-smi names them, or a plain statement that there are none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "none visible (CPU)"
    try:
        res = subprocess.run(
            [smi, "--query-gpu=name,memory.total", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (nvidia-smi failed)"
    names = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    return f"{len(names)} x {names[0]}" if names else "unknown (nvidia-smi listed none)"


def _is_local(url: str) -> bool:
    return (urlparse(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


def _kv(facts: ServerFacts | None) -> KvHeadroom:
    if facts is None or not facts.cache_config:
        return KvHeadroom()
    cache = facts.cache_config

    def num(key: str) -> float | None:
        value = cache.get(key)
        try:
            return float(value) if value not in (None, "", "None") else None
        except ValueError:
            return None

    blocks, size = facts.num_gpu_blocks, facts.block_size
    memory, util = num("kv_cache_memory_bytes"), num("gpu_memory_utilization")
    return KvHeadroom(
        num_gpu_blocks=blocks,
        block_size=size,
        kv_tokens=blocks * size if blocks and size else None,
        kv_cache_memory_bytes=int(memory) if memory is not None else None,
        gpu_memory_utilization=util,
        cache_dtype=cache.get("cache_dtype"),
        kv_cache_usage=facts.kv_cache_usage,
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def from_args(
    args: list[str],
    source: str,
    facts: ServerFacts | None = None,
    gpu: str | None = None,
    lengths: tuple[float | None, float | None] = (None, None),
) -> Inventory:
    """From the arguments vLLM's server parser sees (``vllm serve`` without the program)."""
    version = K.LATEST_KNOWN
    unparsed_version = None
    if facts and facts.version:
        try:
            version = K.parse_version(facts.version)
        except K.VersionParseError:
            unparsed_version = facts.version  # not a vLLM release number: read its flags as the newest known vLLM's
    spec = extract_speculation(args, version).config
    model = model_argument(args) or "unknown"
    draft = spec.get("model") if spec else None
    tp = option_value(args, "--tensor-parallel-size", "-tp")
    mml = option_value(args, "--max-model-len")
    notes = []
    if facts is None:
        notes.append("no running server was read: KV headroom and vLLM version unknown (add --url)")
    if unparsed_version is not None:
        notes.append(
            f"the server's version '{unparsed_version}' is not a vLLM release number; its flags were read "
            f"as vLLM {'.'.join(map(str, K.LATEST_KNOWN))}'s"
        )
    return Inventory(
        specguard_version=__version__,
        recorded_at=_now(),
        source=source,
        vllm_version=facts.version if facts else None,
        model=identity(model, option_value(args, "--revision")),
        draft=identity(str(draft), spec.get("revision") if spec else None)
        if isinstance(draft, str) and draft not in ("ngram", "[ngram]")
        else None,
        speculative_config=spec,
        gpu=gpu,
        tensor_parallel_size=int(tp) if tp and tp.isdigit() else 1,
        max_model_len=int(mml) if mml and mml.isdigit() else (_served_max_len(facts)),
        dtype=option_value(args, "--dtype"),
        quantization=option_value(args, "--quantization", "-q"),
        kv_cache_dtype=option_value(args, "--kv-cache-dtype"),
        mean_prompt_tokens=lengths[0],
        mean_output_tokens=lengths[1],
        kv=_kv(facts),
        notes=notes,
    )


def _served_max_len(facts: ServerFacts | None) -> int | None:
    if facts and facts.models and facts.models[0].get("max_model_len"):
        return int(facts.models[0]["max_model_len"])
    return None


def spec_args(spec: ServerSpec) -> list[str]:
    """A launch spec as server arguments (what build_argv appends after the entry point)."""
    return build_argv(spec, ["vllm", "serve"], spec.port or 0)[2:]


def from_spec(
    spec: ServerSpec, facts: ServerFacts | None, source: str, lengths: tuple[float | None, float | None] = (None, None)
) -> Inventory:
    local = facts is None or _is_local(facts.url)
    return from_args(spec_args(spec), source, facts, detect_gpu() if local else None, lengths)


def from_server(
    facts: ServerFacts,
    speculative_config: dict[str, Any] | None,
    gpu: str | None,
    lengths: tuple[float | None, float | None] = (None, None),
) -> Inventory:
    """A running server: what it reports, plus what it cannot (its speculative config, its GPU) from the caller."""
    root = facts.models[0].get("root") if facts.models else None
    args = [str(root or (facts.models[0].get("id") if facts.models else "unknown"))]
    if speculative_config is not None:
        args += ["--speculative-config", json.dumps(speculative_config)]
    inv = from_args(args, f"running server {facts.url}", facts, gpu or (detect_gpu() if _is_local(facts.url) else None), lengths)
    if speculative_config is None:
        inv.notes.append(
            "the server does not expose its speculative config: "
            + (
                "speculation is ON (spec-decode counters present); pass --config to record it"
                if facts.speculation_on
                else "speculation is off (no spec-decode counters)"
            )
        )
    if gpu is None and not _is_local(facts.url):
        inv.notes.append("GPU unknown for a remote server: pass --gpu")
    return inv


def lengths_from_runs(run_dirs: list[Path]) -> tuple[float | None, float | None]:
    """Mean prompt and output tokens of the completed requests in benchmark run directories."""
    from specguard.results.run_dir import load_run

    prompts: list[int] = []
    outputs: list[int] = []
    for run_dir in run_dirs:
        _, records, _ = load_run(run_dir)
        prompts += [r.prompt_tokens for r in records if r.prompt_tokens is not None]
        outputs += [r.output_tokens for r in records if r.output_tokens is not None]
    return _mean(prompts), _mean(outputs)


def _mean(values: list[int]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None
