# The two commands that matter on a fresh machine (see README.md).
.PHONY: setup demo test

setup:
	@scripts/setup.sh

# The main job on the embedded default: a real vLLM on CPU, baseline vs n-gram speculation.
demo: setup
	.venv/bin/specguard demo

# The whole test suite, real vLLM servers included. pytest's exit code 5 (no tests) fails like any other.
test: setup
	.venv/bin/python -m pytest --durations=25
