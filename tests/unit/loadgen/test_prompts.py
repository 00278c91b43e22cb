import json

import pytest

from specguard.loadgen.client import build_payload
from specguard.loadgen.prompts import PromptFileError, PromptItem, load_prompt_file, load_prompts, synthetic_prompts
from specguard.results.models import SamplingOverrides


def write(tmp_path, lines):
    p = tmp_path / "prompts.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_good_file_keeps_file_lines(tmp_path):
    p = write(
        tmp_path,
        [
            json.dumps({"prompt": "hello", "segment": "chat", "max_tokens": 8}),
            "",
            json.dumps({"messages": [{"role": "user", "content": "hi"}], "temperature": 0.0}),
        ],
    )
    ps = load_prompt_file(p)
    assert len(ps.items) == 2
    assert ps.lines == [0, 2]
    assert ps.items[0].segment == "chat" and ps.items[1].segment == "default"


@pytest.mark.parametrize(
    "line,expected",
    [
        ('{"prompt": "a"', "not valid JSON"),
        ('["a"]', "expected a JSON object"),
        ('{"segment": "x"}', "exactly one of 'prompt' or 'messages'"),
        ('{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}', "exactly one of"),
        ('{"prompt": "a", "max_token": 5}', "key 'max_token': unknown key"),
        ('{"prompt": "a", "max_tokens": 0}', "key 'max_tokens'"),
        ('{"prompt": "a", "temperature": "hot"}', "key 'temperature'"),
        ('{"messages": [{"role": "robot", "content": "b"}]}', "key 'messages.0.role'"),
        ('{"prompt": "a", "top_p": 1.5}', "key 'top_p'"),
    ],
)
def test_bad_line_names_file_line_and_reason(tmp_path, line, expected):
    p = write(tmp_path, [json.dumps({"prompt": "fine"}), line])
    with pytest.raises(PromptFileError) as e:
        load_prompt_file(p)
    assert f"{p}:2:" in str(e.value)
    assert expected in str(e.value)


def test_empty_and_missing_files(tmp_path):
    p = write(tmp_path, ["", "  "])
    with pytest.raises(PromptFileError, match="the prompt file is empty"):
        load_prompt_file(p)
    with pytest.raises(PromptFileError, match="prompt file not found"):
        load_prompt_file(tmp_path / "absent.jsonl")
    with pytest.raises(PromptFileError, match="is a directory"):
        load_prompt_file(tmp_path)
    (tmp_path / "bom.jsonl").write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\n')
    with pytest.raises(PromptFileError, match="byte-order mark"):
        load_prompt_file(tmp_path / "bom.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\x00\x01\x02garbage")
    with pytest.raises(PromptFileError, match="binary file"):
        load_prompt_file(tmp_path / "bin.jsonl")


def test_synthetic_sets_are_seeded():
    for name in ("random", "repetitive", "open-ended"):
        a = synthetic_prompts(name, count=5, seed=1)
        assert a == synthetic_prompts(name, count=5, seed=1)
        assert a != synthetic_prompts(name, count=5, seed=2)
    with pytest.raises(PromptFileError, match="unknown synthetic"):
        load_prompts("synthetic:poetry")


def test_payload_requests_streaming_usage_and_applies_overrides():
    item = PromptItem(prompt="p", max_tokens=10, temperature=0.7, ignore_eos=True, stop=["\n"])
    body = build_payload("completions", "m", item, SamplingOverrides(temperature=0.0), 64)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["temperature"] == 0.0 and body["max_tokens"] == 10 and body["ignore_eos"] is True
    assert body["stop"] == ["\n"] and body["prompt"] == "p"
    chat = build_payload("chat", "m", item, SamplingOverrides(), 64)
    assert chat["messages"] == [{"role": "user", "content": "p"}] and chat["temperature"] == 0.7
