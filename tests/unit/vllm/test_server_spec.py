import json

from specguard.vllm.server_spec import ServerSpec, build_argv


def test_module_entry_point_uses_model_flag():
    spec = ServerSpec(
        model="/m/target",
        served_model_name="tiny",
        max_model_len=1024,
        speculative_config={"method": "ngram", "num_speculative_tokens": 4},
        extra_args=["--seed", "1"],
    )
    argv = build_argv(spec, ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"], 8123)
    assert argv[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/target"]
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--served-model-name") + 1] == "tiny"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "ngram", "num_speculative_tokens": 4}
    assert argv[-2:] == ["--seed", "1"]
    assert "--tensor-parallel-size" not in argv


def test_console_script_takes_model_positionally():
    spec = ServerSpec(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel_size=4, dtype="bfloat16")
    argv = build_argv(spec, ["vllm", "serve"], 8000)
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert "--model" not in argv and "--speculative-config" not in argv
