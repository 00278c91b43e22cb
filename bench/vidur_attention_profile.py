"""Write a synthetic attention.csv for Vidur's Llama-2-70B on H100, from a roofline (not a GPU profile).

Vidur's stored snapshot (github microsoft/vidur, 7d47513, 2024-11-19) has mlp.csv for
meta-llama/Llama-2-70b-hf on h100 but no attention.csv blob for any model (Git LFS), and Vidur will not
start without one. This writes that file with the rows, columns and grid Vidur's own attention profiler
writes with its default arguments (vidur/profiling/attention/main.py: max_seq_len 4096, decode batch 1 to
128, block 16, TP 1, 2, 4 and 8), with each time from a roofline of one layer on one GPU at fp16:

- decode (batch B, KV length L): read B x L x 2 x kv_heads x 128 x 2 bytes of KV and B x q_heads x 128 x 4
  bytes of queries and outputs; 4 x B x L x q_heads x 128 FLOPs.
- prefill (chunk C after K cached tokens): read (K + C) tokens of KV, C tokens of queries and outputs;
  4 x q_heads x 128 x C x (K + (C + 1) / 2) FLOPs (causal).
- time = max(bytes / (3.35e12 B/s x 0.7), FLOPs / (989e12 FLOP/s x 0.5)) + 8 us; the KV-cache save is
  num_tokens x 2 x kv_heads x 128 x 2 bytes written and read at the same bandwidth, + 3 us.

3.35 TB/s and 989 TFLOP/s are the H100 SXM figures (specguard's catalog uses the same); the efficiencies and
fixed costs are round guesses. This shapes what Vidur predicts (its accuracy), not how fast Vidur runs: its
predictor fits and tabulates this file the same way whatever the numbers in it.

Run with any Python 3 (standard library only):
    python bench/vidur_attention_profile.py --out VIDUR_SRC/data/profiling/compute/h100/meta-llama/Llama-2-70b-hf/attention.csv
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

# Llama-2-70B (Vidur's model config for meta-llama/Llama-2-70b-hf).
N_EMBD, N_Q_HEAD, N_KV_HEAD, HEAD_DIM = 8192, 64, 8, 128
HBM_BYTES_PER_S, FLOPS = 3.35e12, 989e12
BW_EFF, FLOP_EFF = 0.7, 0.5
ATTN_FIXED_MS, SAVE_FIXED_MS = 0.008, 0.003
BYTES = 2  # fp16, as Vidur's profiler runs
MAX_SEQ_LEN, MIN_BATCH, MAX_BATCH, BLOCK_SIZE = 4096, 1, 128, 16
STATS = ("min", "max", "mean", "median", "std")


def _chunk_sizes() -> list[int]:
    # Vidur's get_attention_prefill_chunk_sizes_to_profile, cut at MAX_SEQ_LEN.
    space = [*range(64, 129, 16), *range(128, 1025, 32), *range(1024, 4097, 64)]
    return [c for c in space if c <= MAX_SEQ_LEN]


def _seq_lengths() -> list[int]:
    # Vidur's get_seq_lengths_to_profile.
    space = [*range(0, 1025, 32), *range(1024, 4097, 64)]
    return [s for s in space if s < MAX_SEQ_LEN]


def _batch_sizes() -> list[int]:
    space = [*range(1, 129), *range(128, 1025, 8)]
    return [b for b in space if MIN_BATCH <= b <= MAX_BATCH]


def _inputs() -> list[tuple[int, int, int, bool]]:
    """(prefill_chunk_size, kv_cache_size, batch_size, is_prefill) as Vidur's get_attention_input_combinations."""
    combos: list[tuple[int, int, int, bool]] = []
    for chunk in _chunk_sizes():
        combos += [(chunk, i * chunk, 1, True) for i in range(MAX_SEQ_LEN // chunk)]
    combos += [(length, 0, 1, True) for length in _seq_lengths()]
    combos += [(0, kv, b, False) for kv in _seq_lengths() for b in _batch_sizes()]
    valid = []
    for chunk, kv, batch, prefill in combos:
        ok = chunk > 0 and chunk + kv <= MAX_SEQ_LEN if prefill else 0 < kv <= MAX_SEQ_LEN
        if ok:
            valid.append((chunk, kv, batch, prefill))
    return valid


def _roofline_ms(nbytes: float, flops: float, fixed_ms: float) -> float:
    return max(nbytes / (HBM_BYTES_PER_S * BW_EFF), flops / (FLOPS * FLOP_EFF)) * 1e3 + fixed_ms


def _row(tp: int, chunk: int, kv: int, batch: int, prefill: bool) -> dict[str, object]:
    hq, hkv = N_Q_HEAD // tp, N_KV_HEAD // tp
    kv_token = 2 * hkv * HEAD_DIM * BYTES
    q_token = 2 * hq * HEAD_DIM * BYTES  # the query read and the output written
    if prefill:
        flops = 4 * hq * HEAD_DIM * chunk * (kv + (chunk + 1) / 2)
        t_prefill = _roofline_ms((kv + chunk) * kv_token + chunk * q_token, flops, ATTN_FIXED_MS)
        t_decode = 0.0
        new_tokens = chunk
    else:
        t_decode = _roofline_ms(batch * kv * kv_token + batch * q_token, 4 * batch * kv * hq * HEAD_DIM, ATTN_FIXED_MS)
        t_prefill = 0.0
        new_tokens = batch
    t_save = 2 * new_tokens * kv_token / (HBM_BYTES_PER_S * BW_EFF) * 1e3 + SAVE_FIXED_MS
    row: dict[str, object] = {}
    for name, value in (("attn_prefill", t_prefill), ("attn_decode", t_decode), ("attn_kv_cache_save", t_save)):
        for stat in STATS:
            row[f"time_stats.{name}.{stat}"] = 0.0 if stat == "std" else round(value, 6)
    row.update(
        n_embd=N_EMBD,
        n_q_head=N_Q_HEAD,
        n_kv_head=N_KV_HEAD,
        block_size=BLOCK_SIZE,
        num_tensor_parallel_workers=tp,
        max_model_len=MAX_SEQ_LEN,
        batch_size=batch,
        prefill_chunk_size=chunk,
        kv_cache_size=kv,
        is_prefill=prefill,
        attention_backend="SYNTHETIC_ROOFLINE",
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 2, 4, 8])
    args = ap.parse_args()
    rows = [_row(tp, *combo) for tp in args.tp for combo in _inputs()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} synthetic (roofline) attention rows to {args.out}")


if __name__ == "__main__":
    main()
