"""Make the embedded model set. Runs under the vLLM runtime's interpreter, never imported by specguard.

Usage: python make_models.py OUT_DIR SPEC_JSON

Writes, in Hugging Face format, a byte-level BPE tokenizer trained on a
deterministic local corpus, and one Llama-architecture model per entry of the
spec (random weights from a fixed seed), all sharing that tokenizer and so
the same vocabulary: a target and a draft for speculative decoding.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WORDS = (
    "the a of to and in is it that for on with as was by at be this are from or an have not "
    "request server token model draft target cache memory latency throughput queue batch prompt "
    "output input speculative decoding accept reject verify propose step block layer head vector "
    "def return if else for while class import self value key list dict none true false print "
    "summary extract report table row column field name date time total count rate error ok"
).split()


def corpus(seed: int, lines: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        kind = i % 3
        if kind == 0:
            out.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 25))) + ".")
        elif kind == 1:
            name = rng.choice(_WORDS)
            out.append(f"def {name}_{i}(x, y):\n    return x + y * {rng.randint(0, 999)}\n")
        else:
            out.append(json.dumps({rng.choice(_WORDS): rng.randint(0, 10**6) for _ in range(4)}))
    return out


def make_tokenizer(out: Path, vocab_size: int, seed: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<|begin|>", "<|end|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed, 4000), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin|>",
        eos_token="<|end|>",
        pad_token="<|pad|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))


def make_model(out: Path, spec: dict[str, Any], vocab_size: int, tok_dir: Path) -> None:
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(spec["seed"])
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_layers"],
        num_attention_heads=spec["num_heads"],
        num_key_value_heads=spec["num_kv_heads"],
        head_dim=spec["hidden_size"] // spec["num_heads"],
        max_position_embeddings=spec["max_position_embeddings"],
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg)
    # A wider init than the default makes the random model's next-token
    # distribution peaked, like a trained model at low temperature.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, spec.get("init_std", 0.02))
    model = model.to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    for f in tok_dir.iterdir():
        shutil.copy(f, out / f.name)


def main() -> None:
    out = Path(sys.argv[1])
    spec = json.loads(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    tok_dir = out / "tokenizer"
    make_tokenizer(tok_dir, spec["vocab_size"], spec["seed"])
    for name, mspec in spec["models"].items():
        make_model(out / name, mspec, spec["vocab_size"], tok_dir)
    print(json.dumps({"ok": True, "dir": str(out)}))


if __name__ == "__main__":
    main()
