"""The pinned inventory: what counts as a changed variable, and how local models are fingerprinted."""

from __future__ import annotations

from pathlib import Path

from specguard.inventory.collect import content_hash, from_args
from specguard.inventory.diff import diff_inventories


def _inv(*args: str):
    return from_args(list(args), "test")


def test_speculation_alone_is_one_variable() -> None:
    d = diff_inventories(
        _inv("/m", "--max-model-len", "4096"),
        _inv(
            "/m",
            "--max-model-len",
            "4096",
            "--speculative-config",
            '{"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 3}',
        ),
    )
    assert d.changed_variables == ["speculation"]
    assert {x.field for x in d.differences} == {"speculative_config", "draft.name"}
    assert not any("variables changed" in w for w in d.warnings)


def test_more_than_one_variable_warns() -> None:
    d = diff_inventories(
        _inv("org/model", "--revision", "abc"),
        _inv(
            "org/model",
            "--revision",
            "def",
            "--quantization",
            "fp8",
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 4}',
        ),
    )
    assert d.changed_variables == ["model revision", "speculation", "quantization"]
    assert any("3 variables changed" in w and "one at a time" in w for w in d.warnings)


def test_unpinned_hub_model_is_called_out() -> None:
    d = diff_inventories(_inv("org/model"), _inv("org/model"))
    assert d.differences == [] and any("not pinned" in w for w in d.warnings)


def test_content_hash_follows_content_and_samples_big_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    big = tmp_path / "model.safetensors"
    with big.open("wb") as fh:
        fh.truncate(300 * 1024**2)  # sparse: over the full-hash limit
    first = content_hash(tmp_path)
    with big.open("r+b") as fh:
        fh.seek(150 * 1024**2)
        fh.write(b"x")  # the unsampled middle: same size, same fingerprint
    assert content_hash(tmp_path) == first
    with big.open("r+b") as fh:
        fh.write(b"y")  # the sampled head
    assert content_hash(tmp_path) != first
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert content_hash(tmp_path) != first
