"""vLLM's checks of ``num_speculative_tokens_per_batch_size`` (k by batch size, 0.25+). Pure.

``SpeculativeConfig`` only types the field (``list[tuple[int, int, int]] | None``). The rules live in
``vllm/v1/spec_decode/dynamic/utils.py`` (read at vllm-project/vllm a6f6bb1d):
``validate_and_normalize_dynamic_sd_schedule`` raises when the scheduler or the model runner builds its lookup
at engine start, so a bad schedule passes the config and stops the server. The messages below are vLLM's own.
``build_dynamic_sd_schedule_lookup`` then fills ``dense[bs] = min(num_speculative_tokens, k)``, carries the
band before a gap into the gap, and the last band up to ``max_num_seqs``: those are warnings, not errors.
"""

from __future__ import annotations

from typing import Any

from specguard.vllm import knowledge as K
from specguard.vllm.findings import Finding

FIELD = "num_speculative_tokens_per_batch_size"
RULE = "vLLM checks the schedule when the engine starts (v1/spec_decode/dynamic/utils.py)"
# docs/features/speculative_decoding/dynamic_speculative_decoding.md: "Tested with Eagle, Eagle-3, and DFlash.
# Other SD methods may or may not work out of the box"; its adaptive example is DSpark.
TESTED_METHODS = {"eagle", "eagle3", "dflash", "dspark"}

Band = tuple[int, int, int]


def _err(message: str, fix: str) -> Finding:
    return Finding(key=FIELD, message=message, rule=RULE, fix=fix)


def _warn(message: str, rule: str, fix: str) -> Finding:
    return Finding(key=FIELD, message=message, rule=rule, fix=fix, severity="warning")


def _rows(raw: Any) -> list[Band] | None:
    """The bands as vLLM's ``int(entry[i])`` reads them, or None when some entry is not three whole numbers."""
    if not isinstance(raw, (list, tuple)):
        return None
    rows: list[Band] = []
    for entry in raw:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            return None
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in entry):
            return None
        rows.append((entry[0], entry[1], entry[2]))
    return rows


def check_schedule(raw: Any, k: int | None, method: str, v: K.Version) -> list[Finding]:
    """Findings for the schedule ``raw`` with ``num_speculative_tokens`` ``k`` (None when unknown or invalid)."""
    if raw is None:
        return []
    if isinstance(raw, (list, tuple)) and any(not isinstance(e, (list, tuple)) or len(e) != 3 for e in raw):
        if v >= K.TYPED_FROM:
            return []  # the type rule already refused it
        return [
            _err(
                "Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
                "(range_start, range_end, num_speculative_tokens).",
                "write each band as [start, end, k]",
            )
        ]
    rows = _rows(raw)
    if rows is None:
        return []  # not whole numbers: the type rule's business
    if not rows:
        return [_err("num_speculative_tokens_per_batch_size must not be empty.", "give bands or remove the key")]
    out: list[Finding] = []
    for start, end, band_k in rows:
        if start <= 0 or end <= 0:
            out.append(_err(f"Batch-size range ({start}, {end}) must be positive.", "batch sizes start at 1"))
        elif start > end:
            out.append(
                _err(
                    f"Batch-size range start must be <= end for ({start}, {end}, {band_k}).",
                    f"write [{end}, {start}, {band_k}]",
                )
            )
        if band_k < 0:
            out.append(_err("num_speculative_tokens_per_batch_size values must be >= 0.", "k = 0 turns speculation off"))
    if out:
        return out  # vLLM raises at the first bad entry, before it looks at the order; all are shown here
    # vLLM sorts by start before this test, so bands out of order but apart pass despite the message.
    ordered = sorted(rows)
    previous_end = 0
    for start, end, _ in ordered:
        if start <= previous_end:
            return [
                _err(
                    "Batch-size ranges must be non-overlapping and sorted.",
                    f"the band starting at {start} overlaps one that ends at {previous_end}",
                )
            ]
        previous_end = end
    if ordered[0][0] != 1:
        return [
            _err(
                "The first batch-size range must start at 1 so every runtime batch size has a defined schedule.",
                f"start the first band at 1, not {ordered[0][0]}",
            )
        ]
    out.extend(_useless(ordered, k, method))
    return out


def _useless(ordered: list[Band], k: int | None, method: str) -> list[Finding]:
    """What vLLM accepts but does not do as written."""
    out: list[Finding] = []
    if k is not None and k > 0:
        over = [b for b in ordered if b[2] > k]
        if over:
            shown = ", ".join(f"[{s}, {e}, {bk}]" for s, e, bk in over)
            out.append(
                _warn(
                    f"band(s) {shown} ask for more than num_speculative_tokens={k}; vLLM drafts {k} there",
                    "build_dynamic_sd_schedule_lookup uses min(num_speculative_tokens, k)",
                    f"lower those k to {k} or raise num_speculative_tokens",
                )
            )
    for (_, end, band_k), (start, _, _) in zip(ordered, ordered[1:], strict=False):
        if start > end + 1:
            carried = min(band_k, k) if k is not None and k > 0 else band_k
            out.append(
                _warn(
                    f"batch sizes {end + 1}-{start - 1} are in no band; vLLM gives them k={carried} of the band before",
                    "gaps carry the previous band's k forward",
                    f"add [{end + 1}, {start - 1}, k] to say what they get",
                )
            )
    if all(b[2] == 0 for b in ordered):
        out.append(
            _warn(
                "every band has k=0: no batch size speculates",
                "k = 0 means no draft tokens for that band",
                "give some band k >= 1, or turn speculation off",
            )
        )
    if K.canonical_method(method) not in TESTED_METHODS:
        out.append(
            _warn(
                f"dynamic k is documented as tested with eagle, eagle3 and dflash; '{method}' may not honour it",
                "dynamic_speculative_decoding.md: other SD methods may or may not work",
                "check the k that vLLM reports per step, or use a fixed num_speculative_tokens",
            )
        )
    return out
