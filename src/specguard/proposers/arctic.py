"""Arctic Inference's own ``SuffixDecodingCache`` behind ``SuffixCache``'s methods, driven as vLLM drives it.

vLLM's ``SuffixDecodingProposer.propose`` (``vllm/v1/spec_decode/suffix_decoding.py``,
0.12 to 0.32), once per step and request with freshly sampled tokens:

* a request with ``num_tokens >= max_model_len`` is skipped: nothing added, nothing drafted;
* a request seen for the first time is started from its prompt (a cached response
  under the same id is evicted first);
* ``add_active_response(req_id, sampled)``, then ``speculate(req_id, last
  max_tree_depth tokens, max_spec_tokens=min(k, max_model_len - num_tokens - 1),
  max_spec_factor, min_token_prob)``;
* requests that left the batch are stopped.

``start_request`` here only records the prompt: vLLM starts a request in the
same call that adds its first tokens, and not at all when that call is past the
limit, so the start happens with the first ``add_response`` under the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specguard.proposers.suffix import SuffixParams


class ArcticSuffixCache:
    """``SuffixCache``'s contract over an instance of Arctic's ``SuffixDecodingCache`` class ``cache_cls``."""

    def __init__(self, params: SuffixParams, cache_cls: Any):
        self.p = params
        self.cache = cache_cls(max_tree_depth=params.max_tree_depth, max_cached_requests=params.max_cached_requests)
        self._k = params.num_speculative_tokens or params.max_tree_depth
        self._prompt: dict[str, list[int]] = {}
        self._context: dict[str, list[int]] = {}

    def start_request(self, req_id: str, prompt: Sequence[int]) -> None:
        self._prompt[req_id] = list(prompt)
        self._context[req_id] = list(prompt)

    def add_response(self, req_id: str, tokens: Sequence[int], max_model_len: int | None = None) -> None:
        context = self._context[req_id]
        context.extend(tokens)
        if max_model_len is not None and len(context) >= max_model_len:
            return
        self._ensure_started(req_id)
        self.cache.add_active_response(req_id, list(tokens))

    def _ensure_started(self, req_id: str) -> None:
        if req_id in self.cache.active_requests:
            return
        if req_id in self.cache.cached_requests:
            self.cache.evict_cached_response(req_id)
        self.cache.start_request(req_id, self._prompt[req_id])

    def speculate(self, req_id: str, max_model_len: int) -> list[int]:
        context = self._context[req_id]
        n = len(context)
        if n >= max_model_len:
            return []
        self._ensure_started(req_id)
        draft = self.cache.speculate(
            req_id,
            context[-self.p.max_tree_depth :],
            max_spec_tokens=min(self._k, max_model_len - n - 1),
            max_spec_factor=self.p.max_spec_factor,
            min_token_prob=self.p.min_token_prob,
        )
        return list(draft.token_ids)

    def stop_request(self, req_id: str) -> None:
        self._prompt.pop(req_id, None)
        self._context.pop(req_id, None)
        if req_id in self.cache.active_requests:
            self.cache.stop_request(req_id)
