"""LocalTokenizer renders chat templates exactly as ``transformers``' ``apply_chat_template`` does: same token ids.

Real-world-shaped templates (tests/data/chat_templates/: Llama-3, Llama-3.1 and
Qwen2.5 with tools, Mistral's raise_exception, a Gemma-like one with
list-of-parts contents, a ``{% generation %}`` block, loop controls, ``tojson``
with its arguments and ``documents``) are each put beside the embedded model
set's tokenizer.json and rendered over a set of conversations twice: here, and
by ``transformers`` in the embedded vLLM runtime's interpreter (a subprocess:
specguard never imports transformers). No server is started.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specguard.embedded.models import ModelSet
from specguard.embedded.runtime import VllmRuntime
from specguard.tokenizer_files import TokenizeError
from specguard.workload.tokenize import LocalTokenizer

pytestmark = pytest.mark.vllm  # needs the runtime's transformers (installed once, cached), not a server

TEMPLATES = Path(__file__).parent.parent / "data" / "chat_templates"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city <b>now</b> & 'later' — 天気",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "e.g. Zürich"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}

CONVERSATIONS: dict[str, dict[str, Any]] = {
    "plain": {
        "messages": [
            {"role": "system", "content": "  Be brief; answer in <b>bold</b> & quote 'this'.  "},
            {"role": "user", "content": "Résumé of «café» — 日本語 please"},
            {"role": "assistant", "content": "Café: 喫茶店."},
            {"role": "user", "content": 'And "tea"?\n\nThanks.'},
        ]
    },
    "single_user": {"messages": [{"role": "user", "content": "hello"}]},
    "tools": {
        "messages": [
            {"role": "user", "content": "Weather in Zürich?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}}
                ],
            },
            {"role": "tool", "content": '{"temp": 21, "sky": "clear <sunny>"}'},
            {"role": "tool", "content": "second result"},
        ],
        "tools": [WEATHER_TOOL],
    },
    "parts": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You see images."}]},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is in it? "}]},
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
            {"role": "user", "content": [{"type": "text", "text": "Sure?"}, {"type": "text", "text": "ünïcode"}]},
        ]
    },
    "not_alternating": {"messages": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]},
    "loop_controls": {
        "messages": [
            {"role": "system", "content": "first"},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "skipped"},
            {"role": "assistant", "content": "STOP"},
            {"role": "user", "content": "never"},
        ]
    },
    "documents": {
        "messages": [{"role": "user", "content": "Cite <doc> & 'it'"}],
        "documents": [{"title": "Ünïcode", "text": "A <tag> & more"}],
        "tools": [WEATHER_TOOL],
    },
}

# Runs in the runtime's interpreter: apply_chat_template's text and its own token ids, or the error it raised.
_TRANSFORMERS = r"""
import json, sys
from transformers import AutoTokenizer
out, tokenizers = [], {}
for case in json.load(sys.stdin):
    tok = tokenizers.get(case["dir"]) or tokenizers.setdefault(case["dir"], AutoTokenizer.from_pretrained(case["dir"]))
    kwargs = dict(tools=case["tools"], documents=case["documents"], add_generation_prompt=case["add_generation_prompt"])
    try:
        text = tok.apply_chat_template(case["messages"], tokenize=False, **kwargs)
        ids = tok.apply_chat_template(case["messages"], tokenize=True, return_dict=True, **kwargs)["input_ids"]
        out.append({"text": text, "ids": list(ids)})
    except Exception as exc:
        out.append({"error": f"{type(exc).__name__}: {exc}"})
print(json.dumps(out))
"""


def _tokenizer_dir(base: Path, models: ModelSet, template: Path) -> Path:
    """The model set's tokenizer with ``template`` as its chat_template.jinja (both renderers read that file)."""
    d = base / template.stem
    d.mkdir()
    source = models.path("tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, d / name)
    shutil.copy(template, d / "chat_template.jinja")
    return d


def _local(d: Path, case: dict[str, Any]) -> dict[str, Any]:
    tok = LocalTokenizer(d)
    kwargs = {"tools": case["tools"], "documents": case["documents"], "add_generation_prompt": case["add_generation_prompt"]}
    try:
        return {"text": tok.render_chat(case["messages"], **kwargs), "ids": tok.encode_chat(case["messages"], **kwargs)}
    except TokenizeError as exc:
        return {"error": str(exc)}


def test_templates_render_to_the_same_token_ids_as_transformers(runtime: VllmRuntime, models: ModelSet, tmp_path: Path) -> None:
    dirs = {t.stem: _tokenizer_dir(tmp_path, models, t) for t in sorted(TEMPLATES.glob("*.jinja"))}
    assert len(dirs) >= 8
    cases = [
        {
            "template": stem,
            "conversation": name,
            "dir": str(d),
            "messages": conv["messages"],
            "tools": conv.get("tools"),
            "documents": conv.get("documents"),
            "add_generation_prompt": agp,
        }
        for stem, d in dirs.items()
        for name, conv in CONVERSATIONS.items()
        for agp in (True, False)
    ]
    done = subprocess.run(
        [str(runtime.python), "-c", _TRANSFORMERS], input=json.dumps(cases), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    rendered = errors = 0
    for case, want in zip(cases, theirs, strict=True):
        label = f"{case['template']} x {case['conversation']} (add_generation_prompt={case['add_generation_prompt']})"
        got = _local(Path(case["dir"]), case)
        if "error" in want:
            # transformers lets the template's exception out; specguard turns it into a TokenizeError that quotes it
            assert "error" in got, f"{label}: transformers raised {want['error']}, specguard rendered {got['text']!r}"
            kind, message = want["error"].split(": ", 1)
            expected = f"chat template: {message}" if kind == "TemplateError" else f"chat template failed: {want['error']}"
            assert got["error"] == expected, label
            errors += 1
        else:
            assert "error" not in got, f"{label}: specguard raised {got['error']}, transformers rendered {want['text']!r}"
            assert got["text"] == want["text"], label
            assert got["ids"] == want["ids"], label
            rendered += 1
    # the set exercises both outcomes: most pairs render, the alternation rules raise
    assert rendered >= 80 and errors >= 4, (rendered, errors)
