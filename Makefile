# The two commands that matter on a fresh machine (see README.md).
.PHONY: setup setup-test demo lint test test-fast docs

# What the demo needs: system packages make and g++, .venv, the embedded runtime and models (scripts/setup.sh).
setup:
	@scripts/setup.sh

# And what the tests drive: haproxy, promtool, chromium, systemd-analyze (installed as root with apt, else named).
setup-test:
	@scripts/setup.sh --test

# The main job on the embedded default: a real vLLM on CPU, baseline vs n-gram speculation.
demo: setup
	.venv/bin/specguard demo

# Lint, format and types, as CI checks them before the tests (mypy --strict for the whole package: pyproject.toml).
lint: setup
	.venv/bin/ruff check src tests bench
	.venv/bin/ruff format --check src tests bench
	.venv/bin/mypy src

# The whole test suite, real vLLM servers included. pytest's exit code 5 (no tests) fails like any other.
# scripts/test.sh: the system tier without vLLM alone (its timing checks), then the vLLM tests with the unit tier
# beside them at nice 19 on two pytest-xdist workers (it fills the cores the vLLM servers leave idle).
test: setup-test
	scripts/test.sh

# The unit tier alone (README: Tests): tests/unit and the in-process CLI tests of tests/cli, which start no
# process and open no socket beyond in-process loopback fakes; `slow`-marked tests are left to `make test`.
test-fast: setup
	.venv/bin/python -m pytest tests/unit tests/cli -m "not slow" -n 2 --durations=10

# The documentation site (mkdocs.yml, docs/) into site/: --strict fails on a broken link, a page missing from the nav or
# any other warning (tests/system/test_docs.py runs the same build; the variable drops Material's end-of-life banner).
docs: setup
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site
