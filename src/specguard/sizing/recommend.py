"""Gate 2: which proposer to try first, and why. Pure.

The order follows the checklist: no speculation when Gate 1 says the traffic
is a poor candidate; a model's own MTP heads when it has them; a same-family
draft at a sensible size when one is given; n-gram (no weights, no KV) when
prompts overlap the output, or as the cheapest first experiment otherwise.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from specguard.sizing.catalog import MODELS, ModelEntry

DEFAULT_K = {"ngram": 4, "ngram_gpu": 4, "draft_model": 5, "eagle": 3, "eagle3": 3, "mtp": 1}
# A draft much above a tenth of the target stops being cheap; far below a hundredth it rarely agrees with it.
DRAFT_RATIO_MAX = 0.15
DRAFT_RATIO_WARN = 0.25
DRAFT_RATIO_MIN = 0.005
NGRAM_GOOD_ACCEPTANCE = 0.5


class Gate1Evidence(BaseModel):
    """What a Gate 1 (``specguard assess``) report says, reduced to what method choice needs."""

    poor_candidate: bool = False
    ngram_acceptance: float | None = None
    mean_prompt_tokens: float | None = None
    mean_output_tokens: float | None = None
    source: str = ""


class Recommendation(BaseModel):
    method: str | None = Field(description="None: leave speculation off")
    num_speculative_tokens: int | None = None
    reasons: list[str] = Field(default_factory=list)
    cautions: list[str] = Field(default_factory=list)
    candidate_drafts: list[str] = Field(default_factory=list)


def gate1_evidence(report: Any, source: str) -> Gate1Evidence:
    """From ``specguard assess --json``: ``segments.{name}.{verdict, ngram.acceptance_rate}``.

    Raises ValueError when the object does not have that shape.
    """
    if not isinstance(report, dict):
        raise ValueError(f"expected a JSON object, got {type(report).__name__}")
    segments = report.get("segments") or {}
    if not isinstance(segments, dict) or not all(isinstance(s, dict) for s in segments.values()):
        raise ValueError("'segments' must map each segment name to its assessment object")
    if not all(isinstance(s.get("ngram", {}), dict) for s in segments.values()):
        raise ValueError("each segment's 'ngram' must be an object")
    verdicts = [str(s.get("verdict", "")).lower() for s in segments.values()]
    rates = [s.get("ngram", {}).get("acceptance_rate") for s in segments.values()]
    rates = [float(r) for r in rates if isinstance(r, (int, float)) and math.isfinite(r)]
    poor = bool(verdicts) and all(v in ("poor candidate", "leave speculation off") for v in verdicts)
    lengths = {
        k: float(report[k]) for k in ("mean_prompt_tokens", "mean_output_tokens") if isinstance(report.get(k), (int, float))
    }
    if not all(math.isfinite(v) and v > 0 for v in lengths.values()):
        raise ValueError(f"mean token lengths must be finite and > 0 (got {lengths})")
    return Gate1Evidence(poor_candidate=poor, ngram_acceptance=max(rates) if rates else None, source=source, **lengths)


def same_family_drafts(target: ModelEntry) -> list[str]:
    out = []
    for m in MODELS.values():
        ratio = m.params / target.params if target.params else 0
        if m.family == target.family and m.vocab_size == target.vocab_size and DRAFT_RATIO_MIN <= ratio <= DRAFT_RATIO_MAX:
            out.append(m.name)
    return out


def check_draft(target: ModelEntry, draft: ModelEntry) -> list[str]:
    cautions = []
    if draft.family != target.family:
        cautions.append(
            f"draft family '{draft.family}' differs from the target's '{target.family}': acceptance is "
            "usually low across families"
        )
    if draft.vocab_size and target.vocab_size and draft.vocab_size != target.vocab_size:
        cautions.append(
            f"vocabularies differ ({draft.vocab_size} vs {target.vocab_size}): vLLM refuses it unless "
            "use_heterogeneous_vocab (0.25+, greedy drafts only)"
        )
    if target.params and draft.params:
        ratio = draft.params / target.params
        if ratio > DRAFT_RATIO_WARN:
            cautions.append(f"the draft is {ratio:.0%} of the target's size: too expensive to run k times per step")
        elif ratio < DRAFT_RATIO_MIN:
            cautions.append(f"the draft is {ratio:.2%} of the target's size: expect low acceptance")
    return cautions


def recommend(target: ModelEntry, draft: ModelEntry | None, method: str | None, evidence: Gate1Evidence | None) -> Recommendation:
    if evidence and evidence.poor_candidate:
        return Recommendation(
            method=None, reasons=[f"Gate 1 ({evidence.source}) rates every segment a poor candidate: leave speculation off"]
        )
    if method:
        rec = Recommendation(
            method=method, num_speculative_tokens=DEFAULT_K.get(method), reasons=[f"method '{method}' was asked for"]
        )
    elif draft is not None:
        rec = Recommendation(
            method="draft_model",
            num_speculative_tokens=DEFAULT_K["draft_model"],
            reasons=[f"a draft model was given ({draft.name})"],
        )
    elif target.mtp_layers:
        rec = Recommendation(
            method="mtp",
            num_speculative_tokens=target.mtp_layers,
            reasons=[f"{target.name} ships {target.mtp_layers} MTP layer(s): trained with the target, no separate draft to load"],
        )
    elif evidence and evidence.ngram_acceptance is not None and evidence.ngram_acceptance >= NGRAM_GOOD_ACCEPTANCE:
        rec = Recommendation(
            method="ngram",
            num_speculative_tokens=DEFAULT_K["ngram"],
            reasons=[
                f"Gate 1 predicts n-gram acceptance {evidence.ngram_acceptance:.0%}: the output "
                "repeats the prompt, and n-gram needs no weights and no KV cache"
            ],
        )
    else:
        rec = Recommendation(
            method="ngram",
            num_speculative_tokens=DEFAULT_K["ngram"],
            reasons=[
                "n-gram needs no weights and no KV cache: the cheapest first experiment",
                "no workload evidence: run Gate 1 (specguard assess) on real request logs first",
            ],
        )
    if draft is not None and rec.method == "draft_model":
        rec.cautions += check_draft(target, draft)
    if rec.method in ("ngram", "draft_model"):
        rec.candidate_drafts = [d for d in same_family_drafts(target) if draft is None or d != draft.name]
        if rec.candidate_drafts and draft is None:
            rec.reasons.append("same-family drafts to try next: " + ", ".join(rec.candidate_drafts))
    return rec
