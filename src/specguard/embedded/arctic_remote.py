"""Arctic Inference's ``SuffixDecodingCache`` in another interpreter (a vLLM runtime's), over a pipe. I/O.

specguard never imports vLLM's environment into its own: where Arctic is installed only next to vLLM
(the embedded runtime, or an operator's vLLM virtualenv), the cache runs in a child process of that
interpreter, as preflight asks vLLM itself. ``RemoteSuffixDecodingCache`` has the methods of Arctic's
class that ``proposers.arctic.ArcticSuffixCache`` calls, so the adapter drives it exactly as it drives
an imported one. Calls without a result are written and not waited for (the child runs them in order);
``speculate`` and a cached-request query wait for their answer, one line each. Which requests are active
is known here without asking: started and not yet stopped. The child exits when its stdin closes, so it
cannot outlive specguard.
"""

from __future__ import annotations

import json
import subprocess
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard.embedded.runtime import default_runtime_dir, load_manifest
from specguard.errors import RuntimeFailure

__all__ = ["RemoteArcticError", "RemoteSuffixDecodingCache", "remote_cache_class", "runtime_arctic_cache"]

_CHILD = r"""
import json, sys
from arctic_inference.suffix_decoding import SuffixDecodingCache
out = sys.stdout
cache = None
for line in sys.stdin:
    op, *args = json.loads(line)
    if op == "init":
        cache = SuffixDecodingCache(max_tree_depth=args[0], max_cached_requests=args[1])
        out.write("ok\n"); out.flush()
    elif op == "spec":
        draft = cache.speculate(args[0], args[1], max_spec_tokens=args[2], max_spec_factor=args[3], min_token_prob=args[4])
        out.write(json.dumps(list(draft.token_ids)) + "\n"); out.flush()
    elif op == "cached":
        out.write("1\n" if args[0] in cache.cached_requests else "0\n"); out.flush()
    else:
        getattr(cache, op)(*args)
"""


class RemoteArcticError(RuntimeFailure):
    """The child interpreter running Arctic's cache failed; the message has its stderr."""


class RemoteSuffixDecodingCache:
    """Arctic's ``SuffixDecodingCache`` (the calls ``ArcticSuffixCache`` makes) in a child of ``python``."""

    def __init__(self, python: Path, max_tree_depth: int, max_cached_requests: int) -> None:
        self._python = python
        self._proc = subprocess.Popen(
            [str(python), "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1 << 16,
        )
        weakref.finalize(self, _close, self._proc)
        self.active_requests: set[str] = set()
        self.cached_requests = _CachedQuery(self)
        self._send("init", max_tree_depth, max_cached_requests)
        if self._answer() != "ok":
            raise RemoteArcticError("unexpected answer to init")

    def start_request(self, req_id: str, prompt: Sequence[int]) -> None:
        self.active_requests.add(req_id)
        self._send("start_request", req_id, [int(t) for t in prompt])

    def add_active_response(self, req_id: str, tokens: Sequence[int]) -> None:
        self._send("add_active_response", req_id, [int(t) for t in tokens])

    def stop_request(self, req_id: str) -> None:
        self.active_requests.discard(req_id)
        self._send("stop_request", req_id)

    def evict_cached_response(self, req_id: str) -> None:
        self._send("evict_cached_response", req_id)

    def speculate(
        self, req_id: str, pattern: Sequence[int], *, max_spec_tokens: int, max_spec_factor: float, min_token_prob: float
    ) -> RemoteDraft:
        self._send("spec", req_id, [int(t) for t in pattern], max_spec_tokens, max_spec_factor, min_token_prob)
        return RemoteDraft(token_ids=json.loads(self._answer()))

    def is_cached(self, req_id: str) -> bool:
        """Whether Arctic still holds the response of ``req_id`` in its global tree."""
        self._send("cached", req_id)
        return self._answer() == "1"

    def close(self) -> None:
        _close(self._proc)

    def _send(self, *message: Any) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message) + "\n")
        except BrokenPipeError as exc:
            raise RemoteArcticError(self._failure()) from exc

    def _answer(self) -> str:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.flush()
        except BrokenPipeError as exc:
            raise RemoteArcticError(self._failure()) from exc
        line = stdout.readline()
        if not line:
            raise RemoteArcticError(self._failure())
        return line.rstrip("\n")

    def _failure(self) -> str:
        self._proc.kill()
        stderr = self._proc.stderr.read() if self._proc.stderr is not None else ""
        last = stderr.strip().splitlines()[-1:] or ["no output"]  # the exception's line, not the child's traceback
        return f"Arctic's suffix cache in {self._python} stopped: {last[0][-500:]}"


@dataclass(frozen=True)
class RemoteDraft:
    token_ids: list[int]


class _CachedQuery:
    """``req_id in cache.cached_requests``, asked of the child (its FIFO eviction decides)."""

    def __init__(self, cache: RemoteSuffixDecodingCache) -> None:
        self._cache = weakref.ref(cache)

    def __contains__(self, req_id: object) -> bool:
        cache = self._cache()
        return cache is not None and cache.is_cached(str(req_id))


def _close(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def remote_cache_class(python: Path) -> Any:
    """A constructor with the signature of Arctic's class, building caches in children of ``python``."""

    def make(max_tree_depth: int, max_cached_requests: int) -> RemoteSuffixDecodingCache:
        return RemoteSuffixDecodingCache(python, max_tree_depth, max_cached_requests)

    return make


def runtime_arctic_cache(python: Path | None = None) -> tuple[Any, str] | None:
    """Arctic's cache in ``python``'s environment, else in the embedded vLLM runtime when its manifest
    records Arctic Inference; None without either. The child is started by the first cache made."""
    if python is None:
        runtime = load_manifest(default_runtime_dir())
        if runtime is None or runtime.arctic_inference_version is None:
            return None
        where = f"arctic_inference {runtime.arctic_inference_version} in the embedded vLLM runtime"
        return remote_cache_class(runtime.python), f"{where} ({runtime.python}, a subprocess)"
    return remote_cache_class(python), f"arctic_inference in {python}'s environment (a subprocess)"
