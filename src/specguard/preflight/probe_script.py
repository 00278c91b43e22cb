"""Runs inside the inspected vLLM's own interpreter; never imported by specguard.

It reads one JSON request on stdin and prints one JSON answer, after the
marker line, on stdout. It asks vLLM itself: the version, the parser's
speculation options, the accepted ``method`` values and config fields, and
whether vLLM's own config classes accept each given speculative config or
command line. Nothing is downloaded: the target is a local directory (a
stand-in with only a ``config.json`` when none is given) and a draft that is
not a local directory is replaced by a stand-in, which the answer says (an
empty name and a custom proposer's import path are passed on as given).

Only the standard library and vLLM are used, so it runs under any vLLM
interpreter without specguard installed there.
"""

import contextlib
import copy
import dataclasses
import io
import json
import os
import shutil
import sys
import tempfile
import typing

MARKER = "--- specguard-probe ---"

STANDIN_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 2048,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}


def _literal_values(tp):
    out = []
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.append(arg)
        else:
            out.extend(_literal_values(arg))
    return out


def _standin(root, name, config):
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(config, fh)
    return path


def _error(exc):
    text = str(exc)
    # pydantic appends the whole input (with the injected target config) to each error: keep the message only.
    lines = [ln for ln in text.splitlines() if "For further information" not in ln]
    return {"error_type": type(exc).__name__, "error": "\n".join(lines)[:1500]}


def _parser():
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for module in ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args"):
        try:
            mod = __import__(module, fromlist=["make_arg_parser"])
            return mod.make_arg_parser(FlexibleArgumentParser()), module
        except (ImportError, AttributeError):
            continue
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs.add_cli_args(FlexibleArgumentParser()), "vllm.engine.arg_utils.EngineArgs.add_cli_args"


def _check_config(cfg, target, tp, max_model_len, root):
    from vllm.engine.arg_utils import EngineArgs

    notes = []
    cfg = copy.deepcopy(cfg)
    model = cfg.get("model") if isinstance(cfg, dict) else None
    method = cfg.get("method") if isinstance(cfg, dict) else None
    # A custom proposer's import path is no draft to load: with method custom_class, or detected as vLLM detects it.
    class_path = isinstance(model, str) and (method == "custom_class" or (method is None and _is_class_path(model)))
    if isinstance(model, str) and model and model not in ("ngram", "[ngram]") and not os.path.isdir(model) and not class_path:
        # A hub name: vLLM would download it. Keep the last path part so name-based method detection still works.
        # An empty name is passed on as it is: it is no download, and vLLM judges it as given.
        cfg["model"] = _standin(root, os.path.join("drafts", model.replace("/", "--")), STANDIN_CONFIG)
        notes.append(f"draft '{model}' is not a local directory: checked with a stand-in Llama config of that name")
    kwargs = {"model": target, "skip_tokenizer_init": True, "speculative_config": cfg, "tensor_parallel_size": tp}
    if max_model_len:
        kwargs["max_model_len"] = max_model_len
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            engine = EngineArgs(**kwargs).create_engine_config()
    except BaseException as exc:  # noqa: BLE001 - every refusal, SystemExit from argparse included, is an answer
        return {"accepted": False, "notes": notes, **_error(exc)}
    spec = engine.speculative_config
    resolved = None
    if spec is not None:
        resolved = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if getattr(spec, key, None) is not None:
                resolved[key] = getattr(spec, key)
    return {"accepted": True, "notes": notes, "resolved": resolved}


def _is_class_path(model):
    """vLLM's own test for a custom proposer's dotted import path; a copy of 0.32's for a release with custom_class
    but not that helper; False where there is no custom_class (a dotted name is then a hub name like any other)."""
    from vllm.config import SpeculativeConfig

    own = getattr(SpeculativeConfig, "_is_custom_proposer_path", None)
    if own is not None:
        return bool(own(model))
    try:
        import vllm.config.speculative as spec_mod

        if "custom_class" not in _literal_values(spec_mod.SpeculativeMethod):
            return False
    except (ImportError, AttributeError):
        return False
    if model.startswith(("http://", "https://", "file://")) or "/" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def _check_argv(parser, argv, target, tp, max_model_len, root):
    from vllm.engine.arg_utils import EngineArgs

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(argv)
    except SystemExit:
        return {"accepted": False, "error_type": "ArgumentError", "error": stderr.getvalue().strip()[-1500:]}
    except BaseException as exc:  # noqa: BLE001
        return {"accepted": False, **_error(exc)}
    notes = []
    model = getattr(args, "model", None) or getattr(args, "model_tag", None)
    if not (model and os.path.isdir(model)):
        notes.append(f"model '{model}' is not a local directory: the engine config was built with a stand-in target")
        args.model = target
    if hasattr(args, "model_tag"):
        args.model_tag = None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            engine_args = EngineArgs.from_cli_args(args)
            engine_args.skip_tokenizer_init = True
            spec = engine_args.create_engine_config().speculative_config
    except BaseException as exc:  # noqa: BLE001
        return {"accepted": False, "notes": notes, **_error(exc)}
    return {
        "accepted": True,
        "notes": notes,
        "speculative": None if spec is None else {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens},
    }


def main():
    request = json.loads(sys.stdin.read() or "{}")
    out = {"python": sys.executable}
    import vllm

    out["version"] = vllm.__version__
    try:
        import importlib.util

        out["packages"] = {"arctic_inference": importlib.util.find_spec("arctic_inference") is not None}
    except Exception:  # noqa: BLE001
        out["packages"] = {}
    from vllm.config import SpeculativeConfig

    out["fields"] = sorted(f.name for f in dataclasses.fields(SpeculativeConfig))
    try:
        import vllm.config.speculative as spec_mod

        out["methods"] = _literal_values(spec_mod.SpeculativeMethod)
    except (ImportError, AttributeError) as exc:
        out["methods"] = None
        out["methods_error"] = f"{type(exc).__name__}: {exc}"
    parser, parser_source = _parser()
    out["parser"] = parser_source
    options = sorted({o for a in parser._actions for o in a.option_strings})
    out["options"] = [o for o in options if "spec" in o or "ngram" in o or o == "-sc"]
    out["option_count"] = len(options)
    root = tempfile.mkdtemp(prefix="specguard-probe-")
    try:
        target = request.get("target") or _standin(root, "target", STANDIN_CONFIG)
        tp = int(request.get("tensor_parallel_size") or 1)
        mml = request.get("max_model_len")
        out["configs"] = [_check_config(c, target, tp, mml, root) for c in request.get("configs", [])]
        out["argvs"] = [_check_argv(parser, a, target, tp, mml, root) for a in request.get("argvs", [])]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sys.stdout.write("\n" + MARKER + "\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
