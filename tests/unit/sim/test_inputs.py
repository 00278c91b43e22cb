"""sim run's --lengths-from and --acceptance-from readers, on real files: bench run directories as ``bench``
writes them, ``assess`` reports and --requests-out files from ``assess`` itself, and a prompt file tokenized
with a tokenizer trained here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specguard.errors import InputFileError, OptionError
from specguard.results.models import MetricsSample, RequestRecord
from specguard.results.run_dir import RunDir
from specguard.results.store import read_jsonl
from specguard.sim.acceptance import parse_acceptance
from specguard.sim.inputs import PROFILE_GRID, acceptance_from, lengths_from
from specguard.workload.assess import assess
from tests.unit.workload.test_workload import IdTokenizer

from .synthetic_runs import write_run

WORDS = "alpha beta gamma delta epsilon zeta eta theta".split()


@pytest.fixture(scope="module")
def spec_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("spec") / "run", k=3, requests=60, seed=4, per_position_counters=True)


@pytest.fixture(scope="module")
def assessed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An ``assess --json`` report and its --requests-out file, of a log whose lengths are known."""
    d = tmp_path_factory.mktemp("assess")
    lines = []
    for i in range(30):
        prompt = " ".join(WORDS[j % len(WORDS)] for j in range(10 + i))  # 10..39 tokens
        output = " ".join(WORDS[j % len(WORDS)] for j in range(5 + 2 * i))  # 5..63 tokens, repeating the prompt
        lines.append({"schema_version": "specguard.request_log/1", "endpoint": "completions", "prompt": prompt,
                      "sampling": {"temperature": 0}, "response": {"text": output}})  # fmt: skip
    log = d / "log.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = assess(log, IdTokenizer(), "ids", sweep=False, suffix=False, requests_out=d / "per-request.jsonl")
    (d / "assess.json").write_text(report.model_dump_json(indent=2))
    return d / "assess.json", d / "per-request.jsonl"


def test_a_bench_run_gives_each_requests_server_counted_lengths(spec_run: Path) -> None:
    taken = lengths_from(spec_run)
    assert taken.lengths is not None and taken.notes == []
    records = read_jsonl(spec_run / RunDir.REQUESTS, RequestRecord)
    assert taken.lengths.pairs == [(r.prompt_tokens, r.output_tokens) for r in sorted(records, key=lambda r: r.sent_s)]
    assert "60 requests of bench run" in taken.lengths.source


def test_a_bench_run_has_its_own_outputs_so_output_len_is_refused(spec_run: Path) -> None:
    with pytest.raises(OptionError, match="--lengths-from and --output-len"):
        lengths_from(spec_run, output_len=64)


def test_a_bench_runs_counters_give_the_per_position_rates(spec_run: Path) -> None:
    taken = acceptance_from(spec_run, "ngram")
    assert taken.acceptance is not None
    after = next(m for m in read_jsonl(spec_run / RunDir.METRICS, MetricsSample) if m.phase == "after")
    assert len(after.accepted_per_position) == 3
    expected = [a / after.counters["spec_drafts"] for a in after.accepted_per_position]
    assert taken.acceptance.per_position == pytest.approx(expected)
    assert taken.acceptance.k == 3 and "k=3" in taken.acceptance.source


def test_a_baseline_run_has_no_acceptance_to_give(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no per-position spec-decode counters"):
        acceptance_from(write_run(tmp_path / "base", requests=20), "ngram")


def test_acceptance_from_needs_a_method(spec_run: Path) -> None:
    with pytest.raises(OptionError, match="--acceptance-from needs --method"):
        acceptance_from(spec_run, None)


def test_requests_out_gives_each_requests_own_pair(assessed: tuple[Path, Path]) -> None:
    _, per_request = assessed
    taken = lengths_from(per_request)
    assert taken.lengths is not None
    assert taken.lengths.pairs == [(10 + i, 5 + 2 * i) for i in range(30)]


def test_an_assess_profile_is_rebuilt_from_its_percentiles_and_says_so(assessed: tuple[Path, Path]) -> None:
    report, _ = assessed
    taken = lengths_from(report)
    assert taken.lengths is not None and len(taken.lengths.pairs) == PROFILE_GRID**2
    prompts = np.asarray([p for p, _ in taken.lengths.pairs])
    outputs = np.asarray([o for _, o in taken.lengths.pairs])
    # the log's prompts are 10..39 (mean 24.5, p50 24.5, max 39), outputs 5..63 (mean 34, max 63)
    assert prompts.mean() == pytest.approx(24.5, rel=0.05) and prompts.max() <= 39
    assert np.median(prompts) == pytest.approx(24.5, abs=1)
    assert outputs.mean() == pytest.approx(34, rel=0.05) and outputs.max() <= 63
    assert "percentiles" in taken.lengths.source and "drawn independently" in taken.notes[0]


def test_an_assess_report_gives_its_ngram_replay_and_refuses_other_methods(assessed: tuple[Path, Path]) -> None:
    report_path, _ = assessed
    taken = acceptance_from(report_path, "ngram")
    doc = json.loads(report_path.read_text())
    assert taken.acceptance is not None
    assert taken.acceptance.per_position == pytest.approx(doc["overall"]["ngram"]["per_position"])
    assert taken.acceptance.k == 4 and "assess replay" in taken.acceptance.source
    with pytest.raises(OptionError, match="replays ngram and suffix only, not --method draft_model"):
        acceptance_from(report_path, "draft_model")
    with pytest.raises(InputFileError, match="no suffix replay"):
        acceptance_from(report_path, "suffix")  # assessed with suffix=False


def test_a_file_that_is_neither_is_refused_for_acceptance(tmp_path: Path) -> None:
    other = tmp_path / "x.json"
    other.write_text('{"a": 1}')
    with pytest.raises(InputFileError, match="expected a 'specguard bench' run directory or an 'assess --json' report"):
        acceptance_from(other, "ngram")


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One token per word: prompt lengths are word counts."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *WORDS])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    d = tmp_path_factory.mktemp("tok")
    tok.save(str(d / "tokenizer.json"))
    return d


def _prompt_file(path: Path, max_tokens: list[int | None]) -> Path:
    items = [{"prompt": " ".join(WORDS[: 3 + i]), **({"max_tokens": m} if m else {})} for i, m in enumerate(max_tokens)]
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path


def test_a_prompt_file_is_tokenized_and_needs_output_len_without_max_tokens(tmp_path: Path, word_tokenizer: Path) -> None:
    prompts = _prompt_file(tmp_path / "p.jsonl", [None, None, 7])
    with pytest.raises(OptionError, match="2 of 3 lines have no response and no max_tokens.*give --output-len"):
        lengths_from(prompts, tokenizer=word_tokenizer)
    taken = lengths_from(prompts, tokenizer=word_tokenizer, output_len=50)
    assert taken.lengths is not None and taken.lengths.pairs == [(3, 50), (4, 50), (5, 50)]
    assert "--output-len 50" in taken.lengths.source


def test_a_prompt_files_max_tokens_are_its_output_lengths(tmp_path: Path, word_tokenizer: Path) -> None:
    taken = lengths_from(_prompt_file(tmp_path / "p.jsonl", [16, 32]), tokenizer=word_tokenizer)
    assert taken.lengths is not None and taken.lengths.pairs == [(3, 16), (4, 32)]
    assert "max_tokens stands for its output length" in taken.notes[0]


def test_a_prompt_file_without_a_tokenizer_asks_for_one(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="give --tokenizer DIR"):
        lengths_from(_prompt_file(tmp_path / "p.jsonl", [8]))


def test_parse_acceptance_is_the_one_parser_and_names_its_option() -> None:
    assert parse_acceptance("0.8, 0.6,0.4") == [0.8, 0.6, 0.4] and parse_acceptance(None) is None
    with pytest.raises(OptionError, match="--acceptance '0.8,x': expected comma-separated numbers"):
        parse_acceptance("0.8,x")
    with pytest.raises(OptionError, match="--acceptance: per-position rates must not increase"):
        parse_acceptance("0.5,0.7")
