"""The embedded model set: a target and a draft sharing one real tokenizer, made once, locally.

The models are Llama-architecture with random weights from fixed seeds (no
hub, no download) and a byte-level BPE tokenizer trained on a generated
corpus. head_dim is 64 because vLLM's CPU attention rejects smaller heads.
They are made by ``make_models.py`` under the runtime's interpreter, which
has torch and transformers; specguard itself imports neither.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from pydantic import BaseModel

from specguard.embedded.runtime import VllmRuntime, specguard_home


class ModelSpec(BaseModel):
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_position_embeddings: int = 2048
    seed: int
    init_std: float = 0.02


class ModelSetSpec(BaseModel):
    vocab_size: int = 2048
    seed: int = 1234
    models: dict[str, ModelSpec] = {
        "target": ModelSpec(hidden_size=256, intermediate_size=512, num_layers=4, num_heads=4, num_kv_heads=2, seed=1),
        "draft": ModelSpec(hidden_size=128, intermediate_size=256, num_layers=1, num_heads=2, num_kv_heads=2, seed=2),
    }

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:12]


class ModelSet(BaseModel):
    root: Path
    spec: ModelSetSpec

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"


MANIFEST = "specguard-models.json"


def default_models_dir(spec: ModelSetSpec) -> Path:
    return specguard_home() / "models" / f"set-{spec.fingerprint()}"


def ensure_models(runtime: VllmRuntime, spec: ModelSetSpec | None = None, root: Path | None = None) -> ModelSet:
    """The model set at ``root``, made on first use (seconds) and reused while the spec is unchanged."""
    spec = spec or ModelSetSpec()
    root = root or default_models_dir(spec)
    manifest = root / MANIFEST
    if manifest.exists():
        try:
            existing = ModelSet.model_validate_json(manifest.read_text())
            if existing.spec == spec and all((root / n / "config.json").exists() for n in spec.models):
                return existing
        except ValueError:
            pass
    script = Path(__file__).with_name("make_models.py")
    proc = subprocess.run(
        [str(runtime.python), str(script), str(root), spec.model_dump_json()],
        capture_output=True,
        text=True,
        timeout=900,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"making the model set in {root} failed:\n{proc.stderr[-3000:]}")
    made = ModelSet(root=root, spec=spec)
    manifest.write_text(made.model_dump_json(indent=2))
    return made


def model_summary(models: ModelSet) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for name in models.spec.models:
        cfg = json.loads((models.path(name) / "config.json").read_text())
        out[name] = {
            "path": str(models.path(name)),
            "layers": cfg["num_hidden_layers"],
            "hidden": cfg["hidden_size"],
            "kv_heads": cfg["num_key_value_heads"],
            "head_dim": cfg.get("head_dim"),
            "vocab": cfg["vocab_size"],
        }
    return out
