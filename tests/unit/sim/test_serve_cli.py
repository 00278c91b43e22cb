"""``sim serve``'s options: validated through SimRequest (bad values exit 2 naming the option), prompt estimates."""

from __future__ import annotations

import math
import re

import pytest
import typer
from typer.testing import CliRunner

from specguard.cli.exit import SpecguardGroup
from specguard.errors import OptionError
from specguard.sim.acceptance import parse_acceptance
from specguard.sim.serve import prompt_tokens
from specguard.sim.serve_cli import register_serve, serve_request


def _app() -> typer.Typer:
    app = typer.Typer(cls=SpecguardGroup)
    sim = typer.Typer()
    register_serve(sim)
    app.add_typer(sim, name="sim")
    return app


def test_options_build_a_request() -> None:
    req = serve_request("llama-3.1-8b", "h100-80gb", method="ngram", acceptance="0.8,0.6", max_num_seqs=4)
    assert req.acceptance == [0.8, 0.6] and req.num_speculative_tokens == 2 and req.max_num_seqs == 4


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"acceptance": "0.5,0.9", "method": "ngram"}, "--acceptance"),
        ({"max_num_seqs": 0}, "--max-num-seqs"),
        ({"draft": "x"}, "--method"),
    ],
)
def test_bad_options_name_the_option(kwargs: dict[str, object], option: str) -> None:
    with pytest.raises(OptionError, match=re.escape(option)):
        serve_request("llama-3.1-8b", "h100-80gb", **kwargs)  # type: ignore[arg-type]


def test_unparsable_acceptance() -> None:
    with pytest.raises(OptionError, match="--acceptance"):
        parse_acceptance("0.8,x")


def test_the_command_is_registered_and_exits_2_on_a_bad_option() -> None:
    runner = CliRunner()
    result = runner.invoke(_app(), ["sim", "serve", "--help"])
    assert result.exit_code == 0 and "--time-scale" in result.output and "--acceptance" in result.output
    bad = runner.invoke(_app(), ["sim", "serve", "--target", "llama-3.1-8b", "--gpu", "h100-80gb", "--time-scale", "0"])
    assert bad.exit_code == 2


def test_prompt_estimate() -> None:
    assert prompt_tokens({"prompt": "a b c d e f g h i j"}, chat=False) == 13
    assert prompt_tokens({"prompt": [1, 2, 3]}, chat=False) == 3
    msgs = {"messages": [{"role": "user", "content": "a b c"}]}
    assert prompt_tokens(msgs, chat=True) == math.ceil(3 * 1.3) + 4
