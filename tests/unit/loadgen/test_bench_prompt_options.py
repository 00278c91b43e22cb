"""``bench``'s prompt options build the same PromptOptions a plan entry does; a bad one names its option."""

import json

import pytest

from specguard.errors import OptionError
from specguard.loadgen.request import BenchRequest, bench_config, prompt_options


def request(tmp_path, **kw):
    return BenchRequest(base_url="http://127.0.0.1:9", model="m", out=tmp_path / "run", num_requests=4, **kw)


def test_options_reach_the_loaded_prompt_set(tmp_path):
    data = tmp_path / "g.jsonl"
    data.write_text(json.dumps({"question": "why?", "kind": "qa"}) + "\n")
    cfg = bench_config(
        request(tmp_path, prompts=str(data), prompt_format="generic", prompt_field=("prompt=question", "segment=kind"))
    )
    assert [(i.prompt, i.segment) for i in cfg.prompts.items] == [("why?", "qa")]
    assert cfg.prompts.generator["field.prompt"] == "question"


def test_length_options_parse_into_the_synthetic_parameters(tmp_path):
    opts = prompt_options(
        request(
            tmp_path,
            prompts="synthetic:lengths",
            prompt_tokens="mean=100,std=10,min=50,max=150",
            prefix_tokens=20,
            output_tokens="32",
        )
    )
    assert (
        opts.synthetic.prompt_tokens.max == 150 and opts.synthetic.prefix_tokens == 20 and opts.synthetic.output_tokens.mean == 32
    )


@pytest.mark.parametrize(
    "kw,expected",
    [
        ({"prompt_field": ("question",)}, "--prompt-field: expected KEY=FIELD"),
        ({"prompt_format": "xml"}, "--prompt-format:"),
        ({"turns": "second"}, "--turns:"),
        ({"prompt_tokens": "mean=big"}, "--prompt-tokens mean=big: mean: expected a number"),
        ({"prompt_tokens": "10", "output_tokens": "-1"}, "--output-tokens mean:"),
        ({"prompt_tokens": "10", "output_tokens": "5", "prefix_tokens": -1}, "--prefix-tokens:"),
    ],
)
def test_bad_prompt_options_name_the_option(tmp_path, kw, expected):
    with pytest.raises(OptionError) as e:
        prompt_options(request(tmp_path, prompts="synthetic:lengths", **kw))
    assert expected in str(e.value)


def test_synthetic_lengths_without_a_tokenizer_stops_before_the_run_dir_is_written(tmp_path):
    from specguard.loadgen.prompts import PromptFileError

    with pytest.raises(PromptFileError, match="--tokenizer DIR"):
        bench_config(request(tmp_path, prompts="synthetic:lengths", prompt_tokens="10", output_tokens="5"))
    assert not (tmp_path / "run").exists()
