"""Real prompt sources, each read from a small file the test writes in its format; bad records name file, place and key."""

import csv
import json
import statistics
import sys

import pytest
from pydantic import ValidationError

from specguard.loadgen.datasets.options import PromptOptions, SyntheticLengths, parse_length_spec
from specguard.loadgen.prompts import PromptFileError, load_prompts

CONVERSATIONS = [
    {
        "id": "c1",
        "conversations": [
            {"from": "system", "value": "be brief"},
            {"from": "human", "value": "hello"},
            {"from": "gpt", "value": "hi there"},
            {"from": "human", "value": "and then?"},
            {"from": "gpt", "value": "nothing"},
        ],
    },
    {"id": "empty", "conversations": []},
    {
        "id": "c2",
        "model": "ignored metadata",
        "conversations": [{"from": "human", "value": "one shot"}, {"from": "gpt", "value": "ok"}],
    },
]


def sharegpt(**kw):
    return PromptOptions(format="sharegpt", **kw)


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_sharegpt_first_turn_keeps_the_system_turn_and_maps_roles(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(CONVERSATIONS, indent=1))
    ps = load_prompts(str(path), options=sharegpt())
    assert [[(m.role, m.content) for m in i.messages] for i in ps.items] == [
        [("system", "be brief"), ("user", "hello")],
        [("user", "one shot")],
    ]
    assert ps.lines == [0, 2]
    assert ps.generator == {"format": "sharegpt", "turns": "first", "records": 3, "skipped_records": 1}


def test_sharegpt_all_turns_gives_the_conversation_up_to_each_assistant_turn(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(CONVERSATIONS))
    ps = load_prompts(str(path), options=sharegpt(turns="all"))
    assert [[m.content for m in i.messages] for i in ps.items] == [
        ["be brief", "hello"],
        ["be brief", "hello", "hi there", "and then?"],
        ["one shot"],
    ]
    assert [i.messages[-1].role for i in ps.items] == ["user"] * 3
    assert ps.lines == [0, 0, 2]
    first = load_prompts(str(path), options=sharegpt())
    assert first.sha256 != ps.sha256, "the same file read two ways must not look like the same prompts"


def test_sharegpt_jsonl_reads_as_the_array_does(tmp_path):
    array = tmp_path / "sg.json"
    array.write_text(json.dumps(CONVERSATIONS))
    lines = write_jsonl(tmp_path / "sg.jsonl", CONVERSATIONS)
    assert (
        load_prompts(str(lines), options=sharegpt(turns="all")).items
        == load_prompts(str(array), options=sharegpt(turns="all")).items
    )


def test_sharegpt_bad_records_name_the_place_and_key(tmp_path):
    bad = [CONVERSATIONS[0], {"id": "x", "conversations": [{"from": "robot", "value": "beep"}]}]
    array = tmp_path / "sg.json"
    array.write_text(json.dumps(bad))
    with pytest.raises(PromptFileError, match=r"sg\.json: record 2: key 'conversations\.0\.from'"):
        load_prompts(str(array), options=sharegpt())
    lines = write_jsonl(tmp_path / "sg.jsonl", [CONVERSATIONS[0], {"id": "x"}])
    with pytest.raises(PromptFileError, match=r"sg\.jsonl:2: key 'conversations': Field required"):
        load_prompts(str(lines), options=sharegpt())
    (tmp_path / "broken.json").write_text('[{"id": 1,\n "conversations": [}]')
    with pytest.raises(PromptFileError, match=r"broken\.json:2: not valid JSON"):
        load_prompts(str(tmp_path / "broken.json"), options=sharegpt())
    (tmp_path / "none.json").write_text(json.dumps([{"id": "e", "conversations": []}]))
    with pytest.raises(PromptFileError, match="no prompts"):
        load_prompts(str(tmp_path / "none.json"), options=sharegpt())


SPEC_BENCH = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now rewrite it."]},
    {"question_id": 82, "category": "math", "turns": ["What is 2+2?"]},
]


def test_spec_bench_category_becomes_the_segment_and_the_first_turn_is_sent(tmp_path):
    path = write_jsonl(tmp_path / "question.jsonl", SPEC_BENCH)
    ps = load_prompts(str(path), options=PromptOptions(format="spec-bench"))
    assert [(i.segment, [m.content for m in i.messages]) for i in ps.items] == [
        ("writing", ["Write a haiku."]),
        ("math", ["What is 2+2?"]),
    ]
    with pytest.raises(ValidationError, match="turns all is not supported: question files hold no answers"):
        PromptOptions(format="spec-bench", turns="all")
    bad = write_jsonl(tmp_path / "bad.jsonl", [SPEC_BENCH[0], {"question_id": 3, "turns": ["q"]}])
    with pytest.raises(PromptFileError, match=r"bad\.jsonl:2: key 'category': Field required"):
        load_prompts(str(bad), options=PromptOptions(format="spec-bench"))
    empty_turns = write_jsonl(tmp_path / "empty.jsonl", [{"question_id": 3, "category": "c", "turns": []}])
    with pytest.raises(PromptFileError, match=r"empty\.jsonl:1: key 'turns'"):
        load_prompts(str(empty_turns), options=PromptOptions(format="spec-bench"))


SPEED_BENCH = [
    {
        "question_id": "q-1",
        "category": "coding",
        "sub_category": "python",
        "turns": ["Reverse a list."],
        "source": "x",
        "src_id": "7",
        "difficulty": "easy",
        "multiturn": False,
    },
    {
        "question_id": "q-2",
        "category": "rag",
        "sub_category": "news",
        "turns": ["Summarise.", "Shorter."],
        "source": "y",
        "src_id": "8",
        "difficulty": "hard",
        "multiturn": True,
    },
]


def test_speed_bench_segments_by_category_or_a_named_key(tmp_path):
    path = write_jsonl(tmp_path / "speed.jsonl", SPEED_BENCH)
    assert [i.segment for i in load_prompts(str(path), options=PromptOptions(format="speed-bench")).items] == ["coding", "rag"]
    by_sub = PromptOptions(format="speed-bench", fields={"segment": "sub_category"})
    assert [i.segment for i in load_prompts(str(path), options=by_sub).items] == ["python", "news"]
    by_missing = PromptOptions(format="speed-bench", fields={"segment": "domain"})
    with pytest.raises(PromptFileError, match=r"speed\.jsonl:1: key 'domain': missing"):
        load_prompts(str(path), options=by_missing)


def generic(**fields):
    return PromptOptions(format="generic", fields=fields)


def test_generic_jsonl_and_json_through_a_field_mapping(tmp_path):
    records = [{"q": "first question", "kind": "qa", "limit": 12, "extra": 1}, {"q": "second", "kind": "qa", "limit": 3}]
    path = write_jsonl(tmp_path / "g.jsonl", records)
    ps = load_prompts(str(path), options=generic(prompt="q", segment="kind", max_tokens="limit"))
    assert [(i.prompt, i.segment, i.max_tokens) for i in ps.items] == [("first question", "qa", 12), ("second", "qa", 3)]
    chats = tmp_path / "g.json"
    chats.write_text(
        json.dumps([{"conv": [{"role": "user", "content": "hi"}]}, {"conv": [{"role": "pirate", "content": "arr"}]}])
    )
    with pytest.raises(PromptFileError, match=r"g\.json: record 2: key 'conv\.0\.role'"):
        load_prompts(str(chats), options=generic(messages="conv"))
    with pytest.raises(PromptFileError, match=r"g\.jsonl:1: key 'prompt': missing \(the field mapping names it\)"):
        load_prompts(str(path), options=generic(prompt="prompt"))
    with pytest.raises(ValidationError, match="format generic needs fields.prompt or fields.messages"):
        PromptOptions(format="generic")
    with pytest.raises(ValidationError, match="only fields.segment can be mapped"):
        PromptOptions(format="sharegpt", fields={"prompt": "q"})


def test_generic_csv_rows_and_their_errors(tmp_path):
    path = tmp_path / "g.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "segment", "max_tokens", "chat"])
        w.writerow(["line one,\nwith a newline", "extraction", "16", json.dumps([{"role": "user", "content": "c1"}])])
        w.writerow(["line two", "chat", "", json.dumps([{"role": "user", "content": "c2"}])])
    ps = load_prompts(str(path), options=generic(prompt="text", segment="segment", max_tokens="max_tokens"))
    assert [(i.prompt, i.segment, i.max_tokens) for i in ps.items] == [
        ("line one,\nwith a newline", "extraction", 16),
        ("line two", "chat", None),
    ]
    assert ps.lines == [0, 1]
    chats = load_prompts(str(path), options=generic(messages="chat"))
    assert [i.messages[0].content for i in chats.items] == ["c1", "c2"]
    with path.open("a", newline="") as f:
        csv.writer(f).writerow(["three", "chat", "many", "[]"])
    with pytest.raises(PromptFileError, match=r"g\.csv: row 3: key 'max_tokens': expected a whole number >= 1 \(got 'many'\)"):
        load_prompts(str(path), options=generic(prompt="text", max_tokens="max_tokens"))
    with pytest.raises(PromptFileError, match=r"g\.csv: row 3: key 'chat': no messages"):
        load_prompts(str(path), options=generic(messages="chat"))
    with pytest.raises(PromptFileError, match=r"not a specguard JSONL prompt file"):
        load_prompts(str(path))
    short = tmp_path / "short.csv"
    short.write_text("text,segment\nonly one\n")
    with pytest.raises(PromptFileError, match=r"short\.csv: row 1: fewer values than the header"):
        load_prompts(str(short), options=generic(prompt="text"))


def test_parquet_reads_with_pyarrow(tmp_path):
    import pyarrow as pa  # the parquet extra: CI installs it (scripts/setup.sh)
    import pyarrow.parquet as pq

    path = tmp_path / "speed.parquet"
    pq.write_table(pa.Table.from_pylist(SPEED_BENCH), path)
    ps = load_prompts(str(path), options=PromptOptions(format="speed-bench"))
    assert [(i.segment, i.messages[0].content) for i in ps.items] == [("coding", "Reverse a list."), ("rag", "Summarise.")]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{"question_id": "a", "turns": ["t"]}]), bad)
    with pytest.raises(PromptFileError, match=r"bad\.parquet: record 1: key 'category'"):
        load_prompts(str(bad), options=PromptOptions(format="speed-bench"))


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError, as where it is absent
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "speed.parquet"
    path.write_bytes(b"PAR1 not read without pyarrow PAR1")
    needs = r"speed\.parquet: reading Parquet needs pyarrow: pip install 'specguard\[parquet\]'"
    with pytest.raises(PromptFileError, match=needs):
        load_prompts(str(path), options=PromptOptions(format="speed-bench"))


def test_the_default_format_is_unchanged_and_keeps_its_hash(tmp_path):
    import hashlib

    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a", "segment": "s"}])
    ps = load_prompts(str(path))
    assert ps.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and ps.generator is None
    with pytest.raises(PromptFileError, match="format, fields and turns apply to prompt files"):
        load_prompts("synthetic:random", options=sharegpt())


# --- synthetic:lengths, measured with a real tokenizer trained here ---------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa red green blue stone river paper cloud".split()
    corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(200)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    d = tmp_path_factory.mktemp("tok")
    tok.save(str(d / "tokenizer.json"))
    return d


def lengths(**kw):
    return PromptOptions(synthetic=SyntheticLengths.model_validate(kw))


def test_synthetic_lengths_hit_the_drawn_token_counts(tokenizer_dir):
    from tokenizers import Tokenizer

    opts = lengths(
        prompt_tokens={"mean": 60, "std": 20, "min": 40, "max": 90},
        prefix_tokens=16,
        output_tokens={"mean": 32, "std": 8, "min": 8, "max": 40},
    )
    ps = load_prompts("synthetic:lengths", seed=3, count=40, options=opts, tokenizer=tokenizer_dir)
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    counts = [len(tok.encode(i.prompt, add_special_tokens=False).ids) for i in ps.items]
    assert all(40 <= n <= 90 for n in counts)
    assert len(set(counts)) > 5 and statistics.stdev(counts) > 5, "std 20 must spread the lengths"
    ids = [tok.encode(i.prompt, add_special_tokens=False).ids for i in ps.items]
    assert len({tuple(x[:16]) for x in ids}) == 1, "every item starts with the same 16 tokens"
    assert len({tuple(x[:17]) for x in ids}) > 1, "and only those are shared"
    assert all(i.ignore_eos and 8 <= i.max_tokens <= 40 for i in ps.items)
    assert len({i.max_tokens for i in ps.items}) > 1
    g = ps.generator
    assert g["items_off_target"] == 0, "every prompt is cut to exactly its drawn length"
    assert g["measured_prefix_tokens"] == 16 and g["prefix_tokens"] == 16 and g["seed"] == 3 and g["count"] == 40
    assert g["measured_prompt_tokens"].startswith(f"mean={statistics.fmean(counts):.1f},min={min(counts)},max={max(counts)}")
    assert g["prompt_tokens"] == "mean=60,std=20,min=40,max=90"
    assert load_prompts("synthetic:lengths", seed=3, count=40, options=opts, tokenizer=tokenizer_dir) == ps
    assert load_prompts("synthetic:lengths", seed=4, count=40, options=opts, tokenizer=tokenizer_dir).items != ps.items


def test_synthetic_lengths_fixed_lengths_and_their_errors(tokenizer_dir, tmp_path):
    opts = lengths(prompt_tokens={"mean": 25}, output_tokens={"mean": 7}, tokenizer=str(tokenizer_dir))
    ps = load_prompts("synthetic:lengths", count=5, options=opts)
    assert {i.max_tokens for i in ps.items} == {7}
    assert ps.generator["measured_prompt_tokens"] == "mean=25.0,min=25,max=25"
    with pytest.raises(PromptFileError, match="give one \\(--tokenizer DIR\\)"):
        load_prompts("synthetic:lengths", options=lengths(prompt_tokens={"mean": 9}, output_tokens={"mean": 4}))
    with pytest.raises(PromptFileError, match="synthetic:lengths needs its parameters"):
        load_prompts("synthetic:lengths")
    with pytest.raises(PromptFileError, match="apply to synthetic:lengths only"):
        load_prompts("synthetic:random", options=opts)
    with pytest.raises(PromptFileError, match=r"tokenizer .*no tokenizer\.json"):
        load_prompts(
            "synthetic:lengths", options=lengths(prompt_tokens={"mean": 9}, output_tokens={"mean": 4}, tokenizer=str(tmp_path))
        )
    with pytest.raises(ValidationError, match=r"prompt_tokens.min \(1\) must exceed prefix_tokens \(4\)"):
        SyntheticLengths.model_validate({"prompt_tokens": {"mean": 9}, "prefix_tokens": 4, "output_tokens": {"mean": 4}})
    with pytest.raises(ValidationError, match="min 9 is above max 3"):
        SyntheticLengths.model_validate({"prompt_tokens": {"mean": 9, "min": 9, "max": 3}, "output_tokens": {"mean": 4}})


def test_length_specs_parse_or_say_what_was_expected():
    assert parse_length_spec("200") == {"mean": 200.0}
    assert parse_length_spec("mean=200,std=50,min=50,max=400") == {"mean": 200.0, "std": 50.0, "min": 50, "max": 400}
    with pytest.raises(ValueError, match="expected N or mean=N"):
        parse_length_spec("avg=3")
    with pytest.raises(ValueError, match="std: expected a number"):
        parse_length_spec("mean=3,std=wide")
